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
}
