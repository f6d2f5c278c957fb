// The answer to `POST /session/{id}/stop` (always 200: stopping is idempotent).
public import WireProtocol

/// Whether a play was in progress and is now stopped.
public struct StopResult: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    public var stopped: Bool

    public init(sessionID: SessionID, stopped: Bool) {
        self.sessionID = sessionID
        self.stopped = stopped
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case stopped
    }
}
