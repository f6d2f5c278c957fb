// Both servers' own JSON beyond the wire: error bodies, WebSocket messages, stored snapshots,
// with the one encoder configuration (`JSONFormat`, the same as the wire's event lines).
public import Foundation
public import WireProtocol

public enum JSONCoding {
    /// `JSONFormat.encoder`: sorted keys, slashes unescaped.
    public static var encoder: JSONEncoder { JSONFormat.encoder }

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
