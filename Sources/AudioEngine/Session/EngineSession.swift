// What the engine keeps per session id, under the manager's lock, and what each command does to
// it: the state machine's answer, the events owed, the position and track fields reset. The
// manager carries the answers out (cancels and closes plays, queues events, schedules work);
// the tick's side is in EngineSession+Tick.swift.
import EngineAPI
import HTTPTypes
import ServiceSupport
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
    /// Deadlines in a row the started play had no frame for (`stuck` at the threshold).
    var ticksWithoutFrame: UInt64 = 0
    /// The position at which the current play ends (`end_at`; nil: where its track does).
    var endAtMS: Int64?
    /// The play being faded out under the current one: its `finished` is still owed.
    var fadingPlayID: UInt64?
    /// The play asked to follow the current one.
    var nextPlayID: UInt64?
    /// The layers mixed into the current play and not ended, oldest first, with the play each
    /// was asked on (its events carry that play's id, across the track's joins).
    var layers: [(layerID: UInt64, playID: UInt64)] = []
    var lastChange = ContinuousClock.now
    /// Wall-clock ms before which the play sends nothing: a hand-over's start (PlayRequest).
    var startAtMS: Int64?
    /// A hand-over to another engine at wall-clock `atMS`: the play ends before its frame at
    /// `positionMS`, or 100 ms past the moment if it fell behind and has not reached it.
    var handOver: (positionMS: Int64, atMS: Int64)?

    /// Cue points in joins, kept across plays; off for a new session.
    var cue = false

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

    /// The play's layers end with it (`layer_ended`, `stopped` when it ran out or failed), before
    /// its `finished`: nothing of a play follows that.
    mutating func endLayers(_ id: SessionID, _ reason: FinishReason) -> [WireEvent] {
        let reason: FinishReason = reason == .finished || reason == .error || reason == .cleanup ? .stopped : reason
        defer { layers = [] }
        return layers.map { WireEvent(type: .layerEnded, sessionID: id, playID: $0.playID, reason: reason, layerID: $0.layerID) }
    }

    /// A layer ended (ran out, failed, called off): its `layer_ended`, once (nil if it had ended).
    mutating func endLayer(_ layerID: UInt64, _ id: SessionID, reason: FinishReason, error: APIError? = nil) -> WireEvent? {
        guard let index = layers.firstIndex(where: { $0.layerID == layerID }) else { return nil }
        let layer = layers.remove(at: index)
        return WireEvent(
            type: .layerEnded, sessionID: id, playID: layer.playID, reason: reason, code: error?.code, message: error?.message,
            layerID: layerID)
    }

    var positionMS: Int64 { MediaTime.sum(positionBaseMS, min(sourceMicrosSinceBase, 1 << 50) / 1_000) }

    /// The position counts again from `position`: a play's start, a seek, a joined track.
    mutating func restartPosition(atMS position: Int64) {
        positionBaseMS = position
        framesSinceBase = 0
        sourceMicrosSinceBase = 0
    }

    /// `playback` becomes the session's play. Returns the play it replaces (to cancel and close)
    /// and the events owed for what it ends: the replaced play's `finished`, the play fading
    /// under it and the play asked to follow it.
    mutating func start(
        _ playback: Playback, _ id: SessionID, url: String, startMS: Int64, metadata: TrackMetadata?
    ) -> (replaced: Playback?, events: [WireEvent]) {
        var events = endLayers(id, .replaced)
        if case .start(let replacing) = machine.handle(.play(playID: playback.playID)), let replacing {
            events.append(SessionManager.finished(id, replacing, .replaced))
        }
        events += owedEnds(id, .replaced)
        let replaced = self.playback
        self.playback = playback
        self.url = url
        self.metadata = metadata
        title = nil
        durationMS = nil
        passthrough = false
        restartPosition(atMS: startMS)
        startAtMS = nil
        handOver = nil
        endAtMS = nil
        // Until the play's first frame goes out, an empty deadline is its start-up, not lateness.
        playStarted = false
        lastChange = .now
        return (replaced, events)
    }

    /// Stops the session's play: the play to cancel and close, and the events owed. Nil when
    /// nothing was playing (a stop is idempotent).
    /// `code` says why when no one asked (`engine_stopping`: the engine is shutting down).
    mutating func stop(_ id: SessionID, code: String? = nil) -> (playID: UInt64, stopped: Playback?, events: [WireEvent])? {
        guard case .stop(let playID) = machine.handle(.stop) else { return nil }
        let stopped = playback
        playback = nil
        handOver = nil
        startAtMS = nil
        lastChange = .now
        var finished = SessionManager.finished(id, playID, .stopped)
        finished.code = code
        return (playID, stopped, endLayers(id, .stopped) + [finished] + owedEnds(id, .stopped))
    }

    /// Where the play will be at wall-clock `atMS` (now `nowMS`), sending one frame per tick until
    /// then, and from there on it sends nothing: the engine taking it over starts there.
    mutating func handOver(at atMS: Int64, now nowMS: Int64) -> Int64 {
        let frames = max(0, atMS - nowMS) / 20
        let position = MediaTime.sum(positionMS, Int64(min(Double(frames * 20) * filters.sourceRate, 1e12)))
        let target = durationMS.map { min(position, $0) } ?? position
        // A play that fell behind gets a few ticks to catch up, no more: the other engine starts then.
        handOver = (target, atMS)
        lastChange = .now
        return target
    }

    /// A seek the state machine allowed: the position the play seeks to (the requested one,
    /// within the track), counted from there.
    mutating func seek(toMS requested: Int64) -> Int64 {
        let target = durationMS.map { min(requested, $0) } ?? requested
        restartPosition(atMS: target)
        // What was encoded is dropped: until the first frame at the target goes out, an empty
        // deadline is the seek's latency, as at a play's start, not a late frame.
        playStarted = false
        return target
    }

    /// `playID` is asked to follow the session's play: the play that carries it, and the event
    /// owed for the ask it replaces (`finished`/`replaced`). Refused when nothing plays.
    mutating func ask(next playID: UInt64, _ id: SessionID) throws(APIError) -> (playback: Playback, events: [WireEvent]) {
        guard machine.hasActivePlay, let playback else {
            throw APIError(status: .conflict, code: "invalid_state", message: "nothing is playing on this session to follow")
        }
        let events = nextPlayID.map { [SessionManager.finished(id, $0, .replaced)] } ?? []
        nextPlayID = playID
        return (playback, events)
    }

    /// The play asked to follow is called off: its `finished`/`stopped`, or nil when none is
    /// asked (or it is already heard).
    mutating func callOffNext(_ id: SessionID) -> WireEvent? {
        guard let next = nextPlayID else { return nil }
        nextPlayID = nil
        return SessionManager.finished(id, next, .stopped)
    }

    /// Whether a session idle since `lastChange` goes at `now`: the play to cancel and close
    /// (a paused one) and the events owed, or nil while it stays.
    mutating func expire(_ id: SessionID, now: ContinuousClock.Instant, idleTimeout: Duration)
        -> (ended: Playback?, events: [WireEvent])?
    {
        guard now - lastChange >= idleTimeout, case .remove(let playID) = machine.handle(.idleTimeout) else { return nil }
        guard let playID else { return (nil, []) }
        return (playback, endLayers(id, .cleanup) + [SessionManager.finished(id, playID, .cleanup)] + owedEnds(id, .cleanup))
    }

    /// What the control API and `/sessions` show of the session.
    /// The session as the API shows it; `complexity` is what transcoding sessions encode at now.
    func info(_ id: SessionID, complexity: Int32) -> SessionInfo {
        SessionInfo(
            sessionID: id, state: machine.state, playID: machine.playID, url: url, title: title,
            thumbnail: metadata?.thumbnail, durationMS: durationMS, positionMS: positionMS, volume: volume,
            passthrough: passthrough, frames: counters, filters: filters.isEmpty ? nil : filters, normalize: normalize,
            cue: cue, startAtMS: startAtMS, handOverAtMS: handOver?.atMS,
            complexity: playback != nil && !passthrough && machine.state == .streaming ? Int(complexity) : nil)
    }
}
