// The body of `POST /session/{id}/pause` and `/resume` (optional; an empty body is `{}`).

/// Names the play a control is meant for: the engine refuses it (409) when that play has been
/// replaced meanwhile, so a late control cannot reach the next track.
public struct PlayTarget: Sendable, Equatable, Codable {
    public var playID: UInt64?

    public init(playID: UInt64? = nil) { self.playID = playID }

    enum CodingKeys: String, CodingKey { case playID = "play_id" }
}
