// `POST /session/{id}/handover`: a play that another engine takes over at an agreed moment.
//
// The engine answers where its play will be at `at_ms` (wall-clock milliseconds since 1970),
// and from then on sends nothing of it: its last frame is the one before that position, and its
// `finished` says `stopped` with code `handed_over`. The other engine starts the same track at
// that position with `start_at_ms` = `at_ms` (PlayRequest), so the session's sound goes on from
// the next frame with nothing repeated or skipped. docs/cluster.md has the whole hand-over.
public import WireProtocol

/// The body of a hand-over request.
public struct HandOverRequest: Sendable, Equatable, Codable {
    /// When the other engine starts, in wall-clock ms since 1970 (a past moment counts as now,
    /// one more than a minute ahead as a minute ahead).
    public var atMS: Int64?

    public init(atMS: Int64?) { self.atMS = atMS }

    enum CodingKeys: String, CodingKey {
        case atMS = "at_ms"
    }
}

/// Where a handed-over play stops: the position of its first frame not sent, and when.
public struct HandOverPoint: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    public var playID: UInt64
    public var positionMS: Int64
    public var atMS: Int64

    public init(sessionID: SessionID, playID: UInt64, positionMS: Int64, atMS: Int64) {
        self.sessionID = sessionID
        self.playID = playID
        self.positionMS = positionMS
        self.atMS = atMS
    }

    /// The most a hand-over may be scheduled ahead.
    public static let maxLeadMS: Int64 = 60_000

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case playID = "play_id"
        case positionMS = "position_ms"
        case atMS = "at_ms"
    }
}
