// The answer to a play request (202): the play's id, which every later event of it carries.
public import WireProtocol

/// A play the engine accepted.
public struct PlayStarted: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    public var playID: UInt64
    public var state: SessionState

    public init(sessionID: SessionID, playID: UInt64, state: SessionState) {
        self.sessionID = sessionID
        self.playID = playID
        self.state = state
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case playID = "play_id"
        case state
    }
}
