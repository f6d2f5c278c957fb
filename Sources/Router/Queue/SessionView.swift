// What clients are told about a session: the answer to `GET /api/sessions/{id}` and every
// `{"type":"state"}` message.
import EngineAPI
import ServiceSupport

/// A session's state as clients see it (`GET /api/sessions/{id}`, `{"type":"state"}` messages).
struct SessionView: Sendable, Equatable, Codable {
    var type = "state"
    var sessionID: String
    /// `idle`, `starting`, `playing` or `paused`.
    var status: String
    var current: Int?
    var nowPlaying: Track?
    var queue: [Track]
    var positionMS: Int64
    var durationMS: Int64?
    var volume: Int
    /// The session's filters (`{"equalizer":[]}` when none).
    var filters: Filters
    /// Whether tracks are brought to the engine's target loudness.
    var normalize: Bool
    /// Whether joins go from a track's cue-out to the next one's cue-in (skipping the silence at
    /// the ends of files).
    var cue: Bool
    /// How long each track is mixed into the next, in ms; 0 joins them on the sample (gapless).
    var crossfadeMS: Int
    var paused: Bool
    var loop: LoopMode
    /// `play` and `queue` commands whose URL is still being resolved, oldest first: each becomes
    /// a track (a `state`) or an `error` event naming its URL.
    var resolving: [PendingTrack] = []
    /// The station this session follows: its clients hear that session's audio and events.
    var following: String?
    /// Connected clients, in the operator's listing (`GET /api/sessions`) only.
    var clients: Int?

    enum CodingKeys: String, CodingKey {
        case type, status, current, queue, volume, filters, normalize, cue, paused, loop, clients, resolving, following
        case sessionID = "session_id"
        case nowPlaying = "now_playing"
        case positionMS = "position_ms"
        case durationMS = "duration_ms"
        case crossfadeMS = "crossfade_ms"
    }

    func json() -> String { JSONCoding.text(self) }
}

/// A command's URL being resolved in the background.
struct PendingTrack: Sendable, Equatable, Codable {
    var url: String
    /// `play` or `queue`.
    var command: String
}
