// All sessions of the engine by id. Control requests change a session through its state machine;
// the pacer takes each tick's events and one frame per streaming session from here, in the order
// the wire promises.
import CoreMetrics
import EngineAPI
import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOPosix
import ServiceSupport
import Synchronization
import WireProtocol

/// Owns every session and its current play.
package final class SessionManager: Sendable {
    struct State {
        var sessions: [SessionID: EngineSession] = [:]
        /// Events not tied to a playback's outbox (control actions), written first in the next tick.
        var pendingEvents: [WireEvent] = []
        var nextPlayID: UInt64 = 1
        var totals = FrameCounters()
        var ticks: UInt64 = 0
        var sessionsCreated: UInt64 = 0
        /// Transcoded frames sent, and those that were the last encoded ahead (nearly late).
        var transcodedFrames: UInt64 = 0
        var tightFrames: UInt64 = 0
        /// What a cluster pair's Router lets this engine play (nil: anything).
        var fence: PlayFence?
    }

    let state = Mutex(State())
    let resolver: SourceResolver
    let configuration: PlaybackConfiguration
    /// Where plays are filled and closed.
    let fills: FillScheduler
    let logger: Logger
    let metrics: EngineMetrics
    /// The complexity in force and the loudness remembered, read by every play's renderer.
    let render: RenderContext
    /// What the engine can still take: plays are admitted or refused here, and the complexity set.
    let load: LoadControl
    /// Where a play's source is resolved and opened.
    private let sources: SourceOpener
    /// Where a layer's page is resolved.
    let background: BackgroundTasks

    package init(
        resolver: SourceResolver, configuration: PlaybackConfiguration, workers: NIOThreadPool,
        openers: NIOThreadPool? = nil, background: BackgroundTasks = BackgroundTasks(),
        metrics: EngineMetrics = EngineMetrics(), load: LoadGovernor.Settings? = nil, logger: Logger
    ) {
        self.metrics = metrics
        self.resolver = resolver
        self.configuration = configuration
        let render = RenderContext(complexity: configuration.encoder.complexity, lead: configuration.leadFrames)
        self.render = render
        self.load = load.map { LoadControl(settings: $0, render: render, metrics: metrics) } ?? .unlimited(render: render)
        let fills = FillScheduler(
            workers: workers, openers: openers ?? workers, configuration: configuration, metrics: metrics,
            network: resolver.network, render: render)
        self.fills = fills
        sources = SourceOpener(resolver: resolver, background: background, fills: fills)
        self.background = background
        self.logger = logger
    }

    // MARK: Control

    /// Starts playing `url` on `sessionID`, replacing whatever that session played.
    package func play(
        sessionID: SessionID, url: String, startMS: Int64 = 0, volume: Int? = nil, filters: Filters? = nil,
        normalize: Bool? = nil, startAtMS: Int64? = nil, cue: Bool? = nil
    ) throws(APIError) -> PlayStarted {
        guard (0...MediaTime.maxMS).contains(startMS) else {
            throw .badRequest("invalid_position", "\"start_ms\" must be from 0 to \(MediaTime.maxMS), got \(startMS)")
        }
        guard sessionID != .engine else {
            throw .badRequest("invalid_session_id", "\"\(SessionID.engine)\" is the id of the engine's own events, not a session's")
        }
        // A moment further ahead than a hand-over ever sets counts as that far: a play never
        // holds its session for longer.
        let startAtMS = startAtMS.map { min($0, MediaTime.sum(Self.wallClockMS(), HandOverPoint.maxLeadMS)) }
        if let volume { try Self.checkVolume(volume) }
        if let problem = filters?.problem { throw .badRequest("invalid_filters", problem) }
        let plan = try resolver.plan(url)
        var ready: ResolvedSource?
        if case .ready(let source) = plan { ready = source }
        var replaced: Playback?
        let playback = try state.withLock { state throws(APIError) -> Playback in
            try Self.checkFence(sessionID, state)
            let active = state.sessions.reduce(0) { $0 + ($1.value.machine.hasActivePlay && $1.key != sessionID ? 1 : 0) }
            guard active < configuration.maxSessions else {
                throw APIError(
                    status: .serviceUnavailable, code: "pool_exhausted",
                    message: "all \(configuration.maxSessions) sessions are in use; stop one or try again later")
            }
            // A play that replaces the session's own takes nothing more; a new one must fit.
            if state.sessions[sessionID]?.machine.hasActivePlay != true {
                let counts = Self.playCounts(state)
                try load.admit(
                    transcoding: counts.transcoding, passthrough: counts.passthrough, layers: counts.layers, now: Self.monotonicSeconds())
            }
            var session = state.sessions[sessionID] ?? newSession(&state)
            if let volume { session.volume = volume }
            if let filters { session.filters = filters }
            if let normalize { session.normalize = normalize }
            if let cue { session.cue = cue }
            let playback = Playback(
                sessionID: sessionID, playID: state.nextPlayID, url: url, startMS: startMS, volume: session.volume,
                filters: session.filters, normalize: session.normalize, cue: session.cue, loudnessTarget: configuration.loudnessTarget,
                source: ready)
            state.nextPlayID += 1
            let started = session.start(playback, sessionID, url: url, startMS: startMS, metadata: ready?.metadata)
            session.startAtMS = startAtMS
            started.replaced?.cancel()
            replaced = started.replaced
            state.pendingEvents += started.events
            state.sessions[sessionID] = session
            return playback
        }
        fills.retire([replaced].compactMap { $0 })
        logger.info("play", metadata: ["session.id": "\(sessionID)", "play.id": "\(playback.playID)", "url": "\(url)"])
        sources.open(plan, for: playback, owner: playback.cancellation, fail: playback.fail) { source in
            playback.provide(source)
            self.state.withLock { state in
                if state.sessions[sessionID]?.playback === playback {
                    state.sessions[sessionID]?.metadata = source.metadata
                }
            }
        }
        return PlayStarted(sessionID: sessionID, playID: playback.playID, state: .extracting)
    }

    /// Asks for `url` to follow the session's play: opened ahead, joined on the sample when
    /// `crossfadeMS` is 0, else mixed into the end of the current track over that time. Replaces
    /// the play asked before (which ends with `finished`/`replaced`).
    func setNext(sessionID: SessionID, url: String, crossfadeMS: Int = 0) throws(APIError) -> NextQueued {
        guard (0...NextRequest.maxCrossfadeMS).contains(crossfadeMS) else {
            throw .badRequest(
                "invalid_crossfade", "\"crossfade_ms\" must be from 0 to \(NextRequest.maxCrossfadeMS), got \(crossfadeMS)")
        }
        let plan = try resolver.plan(url)
        var ready: ResolvedSource?
        if case .ready(let source) = plan { ready = source }
        let (playback, next) = try state.withLock { state throws(APIError) -> (Playback, NextPlay) in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            let playID = state.nextPlayID
            let (playback, events) = try session.ask(next: playID, sessionID)
            state.nextPlayID += 1
            state.pendingEvents += events
            let next = NextPlay(
                playID: playID, url: url, fadeFloats: Int(2 * MediaTime.samples(ms: Int64(crossfadeMS))),
                metadata: ready?.metadata, source: ready)
            playback.setNext(next)
            state.sessions[sessionID] = session
            return (playback, next)
        }
        let playID = next.playID
        logger.info(
            "next", metadata: ["session.id": "\(sessionID)", "play.id": "\(playID)", "url": "\(url)", "crossfade.ms": "\(crossfadeMS)"])
        sources.open(plan, for: playback, owner: next.cancellation, fail: { playback.failNext($0, playID: playID) }) {
            playback.provideNext($0, playID: playID)
        }
        return NextQueued(sessionID: sessionID, playID: playID, crossfadeMS: crossfadeMS)
    }

    /// Calls off the play asked to follow (`finished`/`stopped`), unless it is already heard.
    func cancelNext(sessionID: SessionID) throws(APIError) -> NextQueued {
        try state.withLock { state throws(APIError) -> NextQueued in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            if let calledOff = session.callOffNext(sessionID) {
                session.playback?.setNext(nil)
                state.pendingEvents.append(calledOff)
                state.sessions[sessionID] = session
            }
            return NextQueued(sessionID: sessionID, playID: nil, crossfadeMS: nil)
        }
    }

    /// Stops the session's play, if any. Idempotent; returns whether something was stopped.
    @discardableResult
    func stop(sessionID: SessionID, code: String? = nil) -> Bool {
        var retired: Playback?
        let stopped = state.withLock { state -> UInt64? in
            guard var session = state.sessions[sessionID], let stop = session.stop(sessionID, code: code) else { return nil }
            stop.stopped?.cancel()
            retired = stop.stopped
            state.sessions[sessionID] = session
            state.pendingEvents += stop.events
            return stop.playID
        }
        fills.retire([retired].compactMap { $0 })
        if let stopped { logger.info("stop", metadata: ["session.id": "\(sessionID)", "play.id": "\(stopped)"]) }
        return stopped != nil
    }

    /// Schedules the session's play to end at wall-clock `atMS`, where another engine takes it
    /// over; answers the position that engine starts at (HandOverRequest).
    /// A moment already past counts as now, one more than a minute ahead as a minute ahead.
    func handOver(sessionID: SessionID, atMS requested: Int64) throws(APIError) -> HandOverPoint {
        let now = Self.wallClockMS()
        let atMS = min(max(requested, now), MediaTime.sum(now, HandOverPoint.maxLeadMS))
        let point = try state.withLock { state throws(APIError) -> HandOverPoint in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            guard session.machine.state == .streaming, session.playStarted, session.startAtMS == nil,
                let playID = session.machine.playID
            else {
                throw APIError(
                    status: .conflict, code: "invalid_state", message: "only a play that is being heard can be handed over")
            }
            let position = session.handOver(at: atMS, now: now)
            state.sessions[sessionID] = session
            return HandOverPoint(sessionID: sessionID, playID: playID, positionMS: position, atMS: atMS)
        }
        logger.info(
            "hand-over scheduled",
            metadata: ["session.id": "\(sessionID)", "position.ms": "\(point.positionMS)", "in.ms": "\(atMS - now)"])
        return point
    }

    /// Milliseconds since 1970 by this host's clock: what two engines agree on a hand-over's moment by.
    static func wallClockMS() -> Int64 {
        Int64(Date().timeIntervalSince1970 * 1_000)
    }

    func pause(sessionID: SessionID, playID: UInt64? = nil) throws(APIError) -> SessionInfo {
        try transition(sessionID, .pause, playID: playID) { session, id in
            WireEvent(type: .paused, sessionID: id, playID: session.machine.playID, positionMS: session.positionMS)
        }
    }

    func resume(sessionID: SessionID, playID: UInt64? = nil) throws(APIError) -> SessionInfo {
        var stale: (Playback, String, Int64)?
        let info = try transition(sessionID, .resume, playID: playID) { session, id in
            if let playback = session.playback, let source = playback.source, let page = source.pageURL,
                let expiry = source.expiresAt, expiry.timeIntervalSinceNow < ResolutionCache.margin
            {
                playback.invalidateSource()
                stale = (playback, page, session.positionMS)
            }
            return WireEvent(type: .resumed, sessionID: id, playID: session.machine.playID, positionMS: session.positionMS)
        }
        if let (playback, page, position) = stale {
            // A long pause outlived the signed stream URL: resolve the page again and carry on
            // from the same position.
            logger.info("stream URL expired; resolving again", metadata: ["session.id": "\(sessionID)"])
            sources.reopen(playback, page: page, atMS: position)
        }
        return info
    }

    func seek(sessionID: SessionID, positionMS requested: Int64, playID: UInt64? = nil) throws(APIError) -> SessionInfo {
        guard (0...MediaTime.maxMS).contains(requested) else {
            throw .badRequest("invalid_position", "\"position_ms\" must be from 0 to \(MediaTime.maxMS), got \(requested)")
        }
        let info = try transition(sessionID, .seek, playID: playID) { session, id in
            let target = session.seek(toMS: requested)
            session.playback?.requestSeek(toMS: target)
            return WireEvent(type: .seeked, sessionID: id, playID: session.machine.playID, positionMS: target)
        }
        if let playback = state.withLock({ $0.sessions[sessionID]?.playback }) { fills.schedule([playback], on: .workers) }
        return info
    }

    /// Sets the session's volume; the play in progress ramps to it in the next frame sent.
    func setVolume(sessionID: SessionID, volume: Int) throws(APIError) -> SessionInfo {
        try Self.checkVolume(volume)
        return try reshape(sessionID) { session, state in
            session.volume = volume
            session.playback?.setVolume(volume)
            state.pendingEvents.append(
                WireEvent(type: .volume, sessionID: sessionID, playID: session.machine.playID, volume: volume))
        }
    }

    /// Replaces the session's filters, heard from the next frame sent (a timescale change from
    /// the next frame encoded, after the lead).
    func setFilters(sessionID: SessionID, filters: Filters) throws(APIError) -> SessionInfo {
        if let problem = filters.problem { throw .badRequest("invalid_filters", problem) }
        return try reshape(sessionID) { session, _ in
            session.filters = filters
            session.playback?.setFilters(filters)
        }
    }

    /// Turns loudness normalisation on or off for the session, from the next frame sent.
    func setNormalize(sessionID: SessionID, enabled: Bool) throws(APIError) -> SessionInfo {
        try reshape(sessionID) { session, _ in
            session.normalize = enabled
            session.playback?.setNormalize(enabled)
        }
    }

    /// Turns cue points on or off for the session: the next join uses them (or not).
    func setCue(sessionID: SessionID, enabled: Bool) throws(APIError) -> SessionInfo {
        try reshape(sessionID) { session, _ in
            session.cue = enabled
            session.playback?.setCue(enabled)
        }
    }

    /// Changes what shapes a session's sound, then renders the frames encoded ahead again at once,
    /// so the change does not wait for the next tick: on an opener thread (normal priority, not
    /// the niced workers), taking the play over from a refill the tick queued if that has not
    /// started (under load, most plays are waiting for their refill at any moment).
    private func reshape(
        _ sessionID: SessionID, _ change: (inout EngineSession, inout State) -> Void
    ) throws(APIError) -> SessionInfo {
        let (info, playback) = try state.withLock { state throws(APIError) -> (SessionInfo, Playback?) in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            change(&session, &state)
            state.sessions[sessionID] = session
            return (session.info(sessionID, complexity: render.complexity), session.playback)
        }
        if let playback, let claim = playback.claimOrTakeOverFill() { fills.schedule(claimed: [(playback, claim)], on: .openers) }
        return info
    }

    /// How many sessions have a play in progress (opening, or heard).
    var playingCount: Int {
        state.withLock { state in
            state.sessions.values.reduce(0) { $0 + ($1.playback != nil && $1.machine.state != .paused ? 1 : 0) }
        }
    }

    /// Stops every session (graceful shutdown); each play's `finished` says `engine_stopping`, so
    /// a Router can tell a play lost with its engine from one a user stopped.
    func stopAll() {
        let ids = state.withLock { Array($0.sessions.keys) }
        for id in ids { stop(sessionID: id, code: "engine_stopping") }
    }

    // MARK: Helpers

    /// A new session; its `progress` events fall on its own tick of the second, so thousands of
    /// sessions started together do not all report on the same tick. Consecutive sessions get
    /// phases 31 ticks apart: sessions of a burst start a tick or so after one another, and
    /// phases one apart would cancel that skew and meet on one tick again.
    private func newSession(_ state: inout State) -> EngineSession {
        var session = EngineSession(normalize: configuration.normalizeByDefault)
        session.progressPhase = (state.sessionsCreated &* 31) % max(configuration.progressInterval, 1)
        state.sessionsCreated &+= 1
        return session
    }

    /// Applies a control input that may be refused; on success queues the event `make` builds.
    /// With `playID`, only while that play is the session's current one (a command meant for a
    /// play that has since been replaced is refused, not applied to its successor).
    private func transition(
        _ id: SessionID, _ input: SessionStateMachine.Input, playID: UInt64? = nil,
        _ make: (inout EngineSession, SessionID) -> WireEvent
    ) throws(APIError) -> SessionInfo {
        try state.withLock { state throws(APIError) -> SessionInfo in
            guard var session = state.sessions[id] else { throw Self.unknown(id) }
            if let playID, session.machine.playID != playID {
                throw APIError(
                    status: .conflict, code: "stale_play",
                    message: "play \(playID) is no longer the session's current play"
                        + (session.machine.playID.map { " (now \($0))" } ?? ""))
            }
            let action = session.machine.handle(input)
            if case .refuse(let reason) = action {
                throw APIError(status: .conflict, code: "invalid_state", message: reason)
            }
            let event = make(&session, id)
            session.lastChange = .now
            state.sessions[id] = session
            state.pendingEvents.append(event)
            return session.info(id, complexity: render.complexity)
        }
    }

    private static func checkVolume(_ volume: Int) throws(APIError) {
        guard (0...1000).contains(volume) else {
            throw .badRequest("invalid_volume", "\"volume\" is a percentage from 0 to 1000, got \(volume)")
        }
    }

    static func unknown(_ id: SessionID) -> APIError {
        APIError(status: .notFound, code: "session_not_found", message: "no session \"\(id)\" on this engine")
    }

    static func finished(_ id: SessionID, _ playID: UInt64, _ reason: FinishReason) -> WireEvent {
        WireEvent(type: .finished, sessionID: id, playID: playID, reason: reason)
    }
}
