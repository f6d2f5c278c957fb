// The part of a session that is stored (SQLite, `Persistence/`) and restored after a restart.

/// What is kept of a session across Router restarts.
struct SessionSnapshot: Sendable, Equatable, Codable {
    var queue = SessionQueue()
    var volume = 100
    var positionMS: Int64 = 0
    /// The engine play of the queue's current generation, while there is one.
    var playID: UInt64?

    enum CodingKeys: String, CodingKey {
        case queue, volume
        case positionMS = "position_ms"
        case playID = "play_id"
    }
}
