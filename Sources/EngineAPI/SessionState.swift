// The states of an engine session, as the design names them and `GET /session/{id}` shows them.

/// Idle → Extracting → Streaming ⇄ Paused → Stopped, and Extracting → Error.
public enum SessionState: String, Codable, Sendable, CaseIterable {
    case idle, extracting, streaming, paused, stopped, error

    /// A play is in progress: it holds one of the engine's sessions and will send events.
    public var isActive: Bool {
        switch self {
        case .extracting, .streaming, .paused: true
        case .idle, .stopped, .error: false
        }
    }
}
