// The one JSON encoder configuration of Tonearm's own encoding, for both processes: event lines
// on the wire, error bodies, WebSocket messages, stored snapshots (Hummingbird encodes route
// answers with its own).
public import Foundation

public enum JSONFormat {
    /// Sorted keys (stable bytes for tests and diffs), slashes unescaped (URLs stay readable).
    public static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        return encoder
    }()
}
