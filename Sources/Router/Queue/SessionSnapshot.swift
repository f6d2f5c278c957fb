// The part of a session that is stored (SQLite, `Persistence/`) and restored after a restart.
import EngineAPI

/// What is kept of a session across Router restarts.
struct SessionSnapshot: Sendable, Equatable, Codable {
    var queue = SessionQueue()
    var volume = 100
    var filters = Filters()
    /// Loudness normalisation: on for a new session (and for one stored before it existed).
    var normalize = true
    /// Cue points in joins: off for a new session (and for one stored before it existed).
    var cue = false
    /// How long each track is mixed into the next, in ms (0: gapless).
    var crossfadeMS = 0
    var positionMS: Int64 = 0
    /// The engine play of the queue's current generation, while there is one.
    var playID: UInt64?
    /// The play ended with its engine (it stopped or restarted), not by anyone's command: the
    /// queue stands stopped at its track and position, and a pair of a cluster that takes the
    /// session over plays it on.
    var interrupted = false
    /// A hand-over between pairs (docs/cluster.md): wall-clock ms at which the pair taking the
    /// session starts its track at `positionMS`; the pair handing it over sends nothing after.
    var startAtMS: Int64?
    /// The station this session follows (its clients hear that session), nil when it follows none.
    var following: String?

    enum CodingKeys: String, CodingKey {
        case queue, volume, filters, normalize, cue
        case startAtMS = "start_at_ms"
        case crossfadeMS = "crossfade_ms"
        case positionMS = "position_ms"
        case playID = "play_id"
        case interrupted, following
    }
}

extension SessionSnapshot {
    /// A row stored before a field existed gets that field's default (filters and normalize came later).
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        queue = try container.decode(SessionQueue.self, forKey: .queue)
        volume = try container.decode(Int.self, forKey: .volume)
        filters = try container.decodeIfPresent(Filters.self, forKey: .filters) ?? Filters()
        normalize = try container.decodeIfPresent(Bool.self, forKey: .normalize) ?? true
        cue = try container.decodeIfPresent(Bool.self, forKey: .cue) ?? false
        crossfadeMS = try container.decodeIfPresent(Int.self, forKey: .crossfadeMS) ?? 0
        positionMS = try container.decode(Int64.self, forKey: .positionMS)
        playID = try container.decodeIfPresent(UInt64.self, forKey: .playID)
        interrupted = try container.decodeIfPresent(Bool.self, forKey: .interrupted) ?? false
        startAtMS = try container.decodeIfPresent(Int64.self, forKey: .startAtMS)
        following = try container.decodeIfPresent(String.self, forKey: .following)
    }
}

extension SessionSnapshot {
    /// Whether the session counts as active in a cluster: a pair must own and play it.
    var isActive: Bool { queue.status != .idle || interrupted }

    /// The snapshot as a new owner starts from it, and whether it is to resume playing.
    func movedToAnotherPair() -> (SessionSnapshot, resume: Bool) {
        var moved = self
        moved.playID = nil
        let resume = moved.queue.playLost() || (interrupted && moved.queue.currentTrack != nil)
        moved.interrupted = false
        return (moved, resume)
    }
}

extension SessionSnapshot {
    /// Moves a playing session's position on by `milliseconds` of the clock (faster or slower
    /// with a timescale), never past its track's end.
    mutating func advance(byPlaying milliseconds: Int64) {
        guard queue.status == .playing, milliseconds > 0 else { return }
        let moved = Int64(min(Double(milliseconds) * filters.sourceRate, 1e12))
        positionMS = min(positionMS + moved, SessionMachine.maxPositionMS)
        if let duration = queue.currentTrack?.durationMS { positionMS = min(positionMS, duration) }
    }
}
