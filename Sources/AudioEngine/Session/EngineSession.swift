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
    /// Which frame of each `progressInterval` carries the `progress` event.
    var progressPhase: UInt64 = 0
    /// The source time those frames covered (20 ms each, but under a timescale), in µs.
    var sourceMicrosSinceBase: Int64 = 0
    /// A frame of the current play (since its start or last seek) has gone out: from then on a
    /// missing frame counts as nulled.
    var playStarted = false
    var counters = FrameCounters()
    /// The play being faded out under the current one: its `finished` is still owed.
    var fadingPlayID: UInt64?
    /// The play asked to follow the current one.
    var nextPlayID: UInt64?
    var lastChange = ContinuousClock.now

    init(normalize: Bool) { self.normalize = normalize }

    /// The `finished` events owed when the session's play ends for `reason`: the play faded out
    /// under it ended with it, and a play asked to follow it never starts (`stopped` when the play
    /// ran out or failed: nothing else stopped it).
    mutating func owedEnds(_ id: SessionID, _ reason: FinishReason) -> [WireEvent] {
        let ending: FinishReason = reason == .error ? .finished : reason
        let cancelled: FinishReason = reason == .finished || reason == .error ? .stopped : reason
        defer {
            fadingPlayID = nil
            nextPlayID = nil
        }
        return [fadingPlayID.map { SessionManager.finished(id, $0, ending) }, nextPlayID.map { SessionManager.finished(id, $0, cancelled) }]
            .compactMap { $0 }
    }

    var positionMS: Int64 { MediaTime.sum(positionBaseMS, min(sourceMicrosSinceBase, 1 << 50) / 1_000) }
}
