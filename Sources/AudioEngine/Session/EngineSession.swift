// What the engine keeps per session id, under the manager's lock.
import EngineAPI
import WireProtocol

/// One engine session: its state machine, its current play and what is known of it.
struct EngineSession {
    var machine = SessionStateMachine()
    var volume = 100
    /// Kept across plays, as the volume is.
    var filters = Filters()
    /// Loudness normalisation, kept across plays; new sessions take the engine's default.
    var normalize: Bool
    var playback: Playback?
    var url: String?
    var metadata: TrackMetadata?
    var title: String?
    var durationMS: Int64?
    var passthrough = false
    /// Position of the first frame sent since the play started or last seeked.
    var positionBaseMS: Int64 = 0
    var framesSinceBase: UInt64 = 0
    /// The source time those frames covered (20 ms each, but under a timescale), in µs.
    var sourceMicrosSinceBase: Int64 = 0
    /// A frame of the current play (since its start or last seek) has gone out: from then on a
    /// missing frame counts as nulled.
    var playStarted = false
    var counters = FrameCounters()
    var lastChange = ContinuousClock.now

    init(normalize: Bool) { self.normalize = normalize }

    var positionMS: Int64 { MediaTime.sum(positionBaseMS, min(sourceMicrosSinceBase, 1 << 50) / 1_000) }
}
