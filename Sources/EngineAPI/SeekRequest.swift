// The body of `POST /session/{id}/seek`.

/// A position in the current play's source, optionally for one play only (see `PlayTarget`).
public struct SeekRequest: Sendable, Equatable, Codable {
    public var positionMS: Int64?
    public var playID: UInt64?

    public init(positionMS: Int64?, playID: UInt64? = nil) {
        self.positionMS = positionMS
        self.playID = playID
    }

    enum CodingKeys: String, CodingKey {
        case positionMS = "position_ms"
        case playID = "play_id"
    }
}
