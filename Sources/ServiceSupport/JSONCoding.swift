// The one JSON configuration of both servers' own encoding: error bodies, WebSocket messages,
// stored snapshots (Hummingbird encodes route answers with its own).
public import Foundation

public enum JSONCoding {
    /// Sorted keys (stable bytes for tests and diffs), slashes unescaped (URLs stay readable).
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        return encoder
    }()

    /// `value` as JSON text. The servers encode structs of strings, numbers and booleans, which
    /// cannot fail; `{}` stands in should one ever.
    public static func text(_ value: some Encodable) -> String {
        String(decoding: (try? encoder.encode(value)) ?? Data("{}".utf8), as: UTF8.self)
    }

    /// The fields of the JSON object `data` whose numbers no 64-bit integer holds, sorted.
    /// Foundation's decoder calls such a body invalid JSON as a whole; this names the field.
    public static func fieldsBeyond64Bits(in data: Data) -> [String] {
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else { return [] }
        return object.compactMap { key, value in
            guard let number = value as? NSNumber, abs(number.doubleValue) >= 0x1p63 else { return nil }
            return key
        }.sorted()
    }
}
