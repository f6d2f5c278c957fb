// All sessions of the engine by id. Control requests change a session through its state machine;
// the pacer takes each tick's events and one frame per streaming session from here, in the order
// the wire promises.
import CoreMetrics
import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOPosix
import Synchronization
import WireProtocol

/// How far ahead sessions encode, the encoder settings, and the engine's limits.
package struct PlaybackConfiguration: Sendable {
    /// Encoded lead in 20 ms frames. Volume changes reach the socket after at most this many
    /// frames, so it is kept small; the compressed read-ahead (seconds) absorbs network stalls.
    var leadFrames = 2
    var encoder = OpusEncoderConfiguration()
    /// Sessions with a play in progress (extracting, streaming or paused) at once.
    package var maxSessions = 60
    /// A stopped, finished, errored or paused session is removed after this long.
    var idleTimeout: Duration = .seconds(300)
    /// Frames between `progress` events (50 = once a second).
    package var progressInterval: UInt64 = 50

    package init() {}
}

/// What a play request answers with.
package struct PlayStarted: Sendable, Equatable, Codable {
    var sessionID: SessionID
    var playID: UInt64
    var state: SessionState

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case playID = "play_id"
        case state
    }
}

/// A session as `GET /session/{id}` shows it.
struct SessionInfo: Sendable, Equatable, Codable {
    var sessionID: SessionID
    var state: SessionState
    var playID: UInt64?
    var url: String?
    var title: String?
    var thumbnail: String?
    var durationMS: Int64?
    var positionMS: Int64
    var volume: Int
    var passthrough: Bool
    var frames: FrameCounters

    enum CodingKeys: String, CodingKey {
        case state, url, title, thumbnail, volume, passthrough, frames
        case sessionID = "session_id"
        case playID = "play_id"
        case durationMS = "duration_ms"
        case positionMS = "position_ms"
    }
}

/// Owns every session and its current play.
package final class SessionManager: Sendable {
    struct Session {
        var machine = SessionStateMachine()
        var volume = 100
        var playback: Playback?
        var url: String?
        var metadata: TrackMetadata?
        var title: String?
        var durationMS: Int64?
        var passthrough = false
        /// Position of the first frame sent since the play started or last seeked.
        var positionBaseMS: Int64 = 0
        var framesSinceBase: UInt64 = 0
        /// A frame of the current play (since its start or last seek) has gone out: from then on a
        /// missing frame counts as nulled.
        var playStarted = false
        var counters = FrameCounters()
        var lastChange = ContinuousClock.now

        var positionMS: Int64 { MediaTime.sum(positionBaseMS, Int64(min(framesSinceBase, 1 << 40)) * 20) }
    }

    private struct State {
        var sessions: [SessionID: Session] = [:]
        /// Events not tied to a playback's outbox (control actions), written first in the next tick.
        var pendingEvents: [WireEvent] = []
        var nextPlayID: UInt64 = 1
        var totals = FrameCounters()
        var ticks: UInt64 = 0
    }

    private let state = Mutex(State())
    private let resolver: SourceResolver
    private let configuration: PlaybackConfiguration
    private let workers: NIOThreadPool
    private let openers: NIOThreadPool
    private let logger: Logger
    let metrics: EngineMetrics

    package init(
        resolver: SourceResolver, configuration: PlaybackConfiguration, workers: NIOThreadPool,
        openers: NIOThreadPool? = nil, metrics: EngineMetrics = EngineMetrics(), logger: Logger
    ) {
        self.metrics = metrics
        self.resolver = resolver
        self.configuration = configuration
        self.workers = workers
        self.openers = openers ?? workers
        self.logger = logger
    }

    // MARK: Control

    /// Starts playing `url` on `sessionID`, replacing whatever that session played.
    package func play(sessionID: SessionID, url: String, startMS: Int64 = 0, volume: Int? = nil) throws(ControlError)
        -> PlayStarted
    {
        guard (0...MediaTime.maxMS).contains(startMS) else {
            throw .badRequest("\"start_ms\" must be from 0 to \(MediaTime.maxMS), got \(startMS)", code: "invalid_position")
        }
        if let volume { try Self.checkVolume(volume) }
        let plan = try resolver.plan(url)
        var ready: ResolvedSource?
        if case .ready(let source) = plan { ready = source }
        var replaced: Playback?
        let playback = try state.withLock { state throws(ControlError) -> Playback in
            let active = state.sessions.reduce(0) { $0 + ($1.value.machine.hasActivePlay && $1.key != sessionID ? 1 : 0) }
            guard active < configuration.maxSessions else {
                throw ControlError(
                    status: .serviceUnavailable, code: "pool_exhausted",
                    message: "all \(configuration.maxSessions) sessions are in use; stop one or try again later")
            }
            var session = state.sessions[sessionID] ?? Session()
            if let volume { session.volume = volume }
            let playback = Playback(
                sessionID: sessionID, playID: state.nextPlayID, url: url, startMS: startMS, volume: session.volume,
                source: ready)
            state.nextPlayID += 1
            if case .start(let replacing) = session.machine.handle(.play(playID: playback.playID)), let replacing {
                session.playback?.cancel()
                state.pendingEvents.append(Self.finished(sessionID, replacing, .replaced))
            }
            replaced = session.playback
            session.playback = playback
            session.url = url
            session.metadata = ready?.metadata
            session.title = nil
            session.durationMS = nil
            session.passthrough = false
            session.positionBaseMS = startMS
            session.framesSinceBase = 0
            session.playStarted = false
            session.lastChange = .now
            state.sessions[sessionID] = session
            return playback
        }
        retire([replaced].compactMap { $0 })
        logger.info("play", metadata: ["session.id": "\(sessionID)", "play.id": "\(playback.playID)", "url": "\(url)"])
        if case .page(let page) = plan {
            Task { [resolver] in
                do {
                    let source = try await resolver.resolvePage(page)
                    playback.provide(source)
                    self.state.withLock { state in
                        if state.sessions[sessionID]?.playback === playback {
                            state.sessions[sessionID]?.metadata = source.metadata
                        }
                    }
                    self.schedule([playback], on: self.openers)
                } catch {
                    playback.fail(error)
                }
            }
        } else {
            schedule([playback], on: openers)
        }
        return PlayStarted(sessionID: sessionID, playID: playback.playID, state: .extracting)
    }

    /// Stops the session's play, if any. Idempotent; returns whether something was stopped.
    @discardableResult
    func stop(sessionID: SessionID) -> Bool {
        var retired: Playback?
        let stopped = state.withLock { state -> UInt64? in
            guard var session = state.sessions[sessionID],
                case .stop(let playID) = session.machine.handle(.stop)
            else { return nil }
            session.playback?.cancel()
            retired = session.playback
            session.playback = nil
            session.lastChange = .now
            state.sessions[sessionID] = session
            state.pendingEvents.append(Self.finished(sessionID, playID, .stopped))
            return playID
        }
        retire([retired].compactMap { $0 })
        if let stopped { logger.info("stop", metadata: ["session.id": "\(sessionID)", "play.id": "\(stopped)"]) }
        return stopped != nil
    }

    func pause(sessionID: SessionID, playID: UInt64? = nil) throws(ControlError) -> SessionInfo {
        try transition(sessionID, .pause, playID: playID) { session, id in
            WireEvent(type: .paused, sessionID: id, playID: session.machine.playID, positionMS: session.positionMS)
        }
    }

    func resume(sessionID: SessionID, playID: UInt64? = nil) throws(ControlError) -> SessionInfo {
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
            Task { [resolver] in
                do {
                    playback.reopen(with: try await resolver.resolvePage(page), atMS: position)
                    self.schedule([playback], on: self.openers)
                } catch {
                    playback.fail(error)
                }
            }
        }
        return info
    }

    func seek(sessionID: SessionID, positionMS requested: Int64, playID: UInt64? = nil) throws(ControlError) -> SessionInfo {
        guard (0...MediaTime.maxMS).contains(requested) else {
            throw .badRequest("\"position_ms\" must be from 0 to \(MediaTime.maxMS), got \(requested)", code: "invalid_position")
        }
        var target = requested
        let info = try transition(sessionID, .seek, playID: playID) { session, id in
            if let duration = session.durationMS { target = min(target, duration) }
            session.playback?.requestSeek(toMS: target)
            session.positionBaseMS = target
            session.framesSinceBase = 0
            // What was encoded is dropped: until the first frame at the target goes out, an empty
            // deadline is the seek's latency, as at a play's start, not a late frame.
            session.playStarted = false
            return WireEvent(type: .seeked, sessionID: id, playID: session.machine.playID, positionMS: target)
        }
        if let playback = state.withLock({ $0.sessions[sessionID]?.playback }) { schedule([playback], on: workers) }
        return info
    }

    func setVolume(sessionID: SessionID, volume: Int) throws(ControlError) -> SessionInfo {
        try Self.checkVolume(volume)
        return try state.withLock { state throws(ControlError) -> SessionInfo in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            session.volume = volume
            session.playback?.setVolume(volume)
            state.sessions[sessionID] = session
            state.pendingEvents.append(
                WireEvent(type: .volume, sessionID: sessionID, playID: session.machine.playID, volume: volume))
            return Self.info(sessionID, session)
        }
    }

    func info(sessionID: SessionID) throws(ControlError) -> SessionInfo {
        try state.withLock { state throws(ControlError) -> SessionInfo in
            guard let session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            return Self.info(sessionID, session)
        }
    }

    func list() -> [SessionInfo] {
        state.withLock { state in
            state.sessions.map { Self.info($0.key, $0.value) }.sorted { $0.sessionID.description < $1.sessionID.description }
        }
    }

    /// Stops every session (graceful shutdown).
    func stopAll() {
        let ids = state.withLock { Array($0.sessions.keys) }
        for id in ids { stop(sessionID: id) }
    }

    var totals: FrameCounters { state.withLock { $0.totals } }

    /// Session counts by state.
    var countsByState: [SessionState: Int] {
        state.withLock { state in
            var counts = Dictionary(uniqueKeysWithValues: SessionState.allCases.map { ($0, 0) })
            for session in state.sessions.values { counts[session.machine.state, default: 0] += 1 }
            return counts
        }
    }

    // MARK: Pacer side

    /// Appends this tick's events and one frame per streaming session to `batch`, counts late
    /// ticks as deficit, and removes idle sessions. Called from the pacer thread only.
    package func collectTick(into batch: inout TickBatch, lateTicks: UInt64) {
        var refill: [Playback] = []
        var retired: [Playback] = []
        let refillAt = max(configuration.leadFrames - 1, 0)
        state.withLock { state in
            for event in state.pendingEvents { batch.append(event) }
            state.pendingEvents.removeAll(keepingCapacity: true)
            state.ticks += 1
            var tickTotals = FrameCounters()
            // Walked by index, in place: `indices` would hold a second reference to the table, so
            // the first update copied every session (profiled: a retain per field per session
            // per tick), and reading `values[index]` would copy one session.
            var index = state.sessions.startIndex
            while index != state.sessions.endIndex {
                defer { index = state.sessions.index(after: index) }
                let id = state.sessions.keys[index]
                guard let (counted, playback, ended) = drain(id, &state.sessions.values[index], into: &batch, lateTicks: lateTicks)
                else { continue }
                tickTotals.add(counted)
                if ended {
                    retired.append(playback)
                } else if playback.claimFill(refillAt: refillAt) {
                    refill.append(playback)
                }
            }
            state.totals.add(tickTotals)
            if tickTotals.sent > 0 { metrics.framesSent.increment(by: Int64(tickTotals.sent)) }
            if tickTotals.nulled > 0 { metrics.framesNulled.increment(by: Int64(tickTotals.nulled)) }
            if tickTotals.deficit > 0 { metrics.framesDeficit.increment(by: Int64(tickTotals.deficit)) }
            if state.ticks % 50 == 0 { removeIdle(&state, into: &batch, retired: &retired) }
        }
        schedule(refill, on: workers, claimed: true)
        retire(retired)
    }

    /// Moves the leading markers and at most one frame of the session's playback into the batch;
    /// nil when it has none. `ended` says the playback is over (and removed from the session).
    private func drain(
        _ id: SessionID, _ session: inout Session, into batch: inout TickBatch, lateTicks: UInt64
    ) -> (counted: FrameCounters, playback: Playback, ended: Bool)? {
        guard let playback = session.playback else { return nil }
        let counted = drain(id, playback, &session, into: &batch, lateTicks: lateTicks)
        return (counted, playback, session.playback == nil)
    }

    private func drain(
        _ id: SessionID, _ playback: Playback, _ session: inout Session, into batch: inout TickBatch, lateTicks: UInt64
    ) -> FrameCounters {
        var counted = FrameCounters()
        let playing = session.machine.state
        guard playing == .streaming || playing == .extracting else { return counted }
        if playing == .streaming && session.playStarted { counted.deficit = lateTicks }
        while true {
            let head: OutboxItem? = playback.outbox.withLock { box in
                guard let item = box.items.popFirst() else { return nil }
                if case .frame = item { box.bufferedFrames -= 1 }
                return item
            }
            guard let head else {
                if session.machine.state == .streaming && session.playStarted { counted.nulled += 1 }
                break
            }
            switch head {
            case .opened(let info, let passthrough):
                guard session.machine.handle(.opened(playID: playback.playID)) == .emitReady else { continue }
                session.title = session.metadata?.title ?? info.title ?? playback.outbox.withLock { $0.source?.displayName }
                session.durationMS = session.metadata?.durationMS ?? info.durationMS
                session.passthrough = passthrough
                session.lastChange = .now
                batch.append(
                    WireEvent(
                        type: .ready, sessionID: id, playID: playback.playID, url: playback.url, title: session.title,
                        durationMS: session.durationMS, positionMS: session.positionMS, volume: session.volume,
                        passthrough: passthrough))
                continue
            case .frame(let packet, let passthrough):
                if batch.append(packet, for: id) { counted.sent = 1 } else { counted.nulled = 1 }
                session.playStarted = true
                session.framesSinceBase += 1
                session.passthrough = passthrough
                if session.framesSinceBase % configuration.progressInterval == 0 {
                    batch.append(
                        WireEvent(type: .progress, sessionID: id, playID: playback.playID, positionMS: session.positionMS))
                }
            case .end(let reason, let error):
                let input: SessionStateMachine.Input =
                    reason == .finished ? .ended(playID: playback.playID) : .failed(playID: playback.playID)
                switch session.machine.handle(input) {
                case .finish:
                    batch.append(Self.finished(id, playback.playID, .finished))
                case .fail:
                    let error = error ?? ControlError.wrap(MediaError(kind: .decodeFailed, message: "the play failed"))
                    batch.append(
                        WireEvent(
                            type: .error, sessionID: id, playID: playback.playID, code: error.code,
                            message: error.message))
                    batch.append(Self.finished(id, playback.playID, .error))
                    metrics.sourceErrors.increment()
                    logger.warning(
                        "play failed",
                        metadata: ["session.id": "\(id)", "play.id": "\(playback.playID)", "error": "\(error)"])
                default:
                    break
                }
                session.playback = nil
                session.lastChange = .now
            }
            break
        }
        session.counters.add(counted)
        return counted
    }

    private func removeIdle(_ state: inout State, into batch: inout TickBatch, retired: inout [Playback]) {
        let now = ContinuousClock.now
        var removed: [SessionID] = []
        for index in state.sessions.indices {
            let id = state.sessions.keys[index]
            guard now - state.sessions.values[index].lastChange >= configuration.idleTimeout else { continue }
            guard case .remove(let playID) = state.sessions.values[index].machine.handle(.idleTimeout) else { continue }
            if let playID {
                state.sessions.values[index].playback?.cancel()
                if let playback = state.sessions.values[index].playback { retired.append(playback) }
                batch.append(Self.finished(id, playID, .cleanup))
            }
            removed.append(id)
        }
        for id in removed {
            state.sessions.removeValue(forKey: id)
            logger.info("idle session removed", metadata: ["session.id": "\(id)"])
        }
    }

    // MARK: Helpers

    /// Closes ended plays' sources on an opener thread: closing (FFmpeg, the read-ahead thread)
    /// can block, and must never happen on the pacer thread or an event loop.
    private func retire(_ playbacks: [Playback]) {
        guard !playbacks.isEmpty else { return }
        openers.submit { _ in
            for playback in playbacks { playback.close() }
        }
    }

    /// Runs fill jobs on a thread pool (never on Swift's cooperative pool: they block in C).
    /// Refill jobs a tick submits at most: enough to keep every worker busy and balanced, few
    /// enough that thousands of passthrough sessions do not cost thousands of thread-pool
    /// submissions and wake-ups every 20 ms (profiled: at 3,000 sessions the pacer fell behind).
    static let refillJobsPerTick = 16

    private func schedule(_ playbacks: [Playback], on pool: NIOThreadPool, claimed: Bool = false) {
        let claimed = claimed ? playbacks : playbacks.filter { $0.claimFill(refillAt: Int.max) }
        guard !claimed.isEmpty else { return }
        let lead = configuration.leadFrames
        let encoder = configuration.encoder
        let metrics = metrics
        let network = resolver.network
        let perJob = (claimed.count + Self.refillJobsPerTick - 1) / Self.refillJobsPerTick
        for start in stride(from: 0, to: claimed.count, by: perJob) {
            let job = claimed[start..<min(start + perJob, claimed.count)]
            pool.submit { _ in
                for playback in job { playback.fill(lead: lead, encoder: encoder, metrics: metrics, network: network) }
            }
        }
    }

    /// Applies a control input that may be refused; on success queues the event `make` builds.
    /// With `playID`, only while that play is the session's current one (a command meant for a
    /// play that has since been replaced is refused, not applied to its successor).
    private func transition(
        _ id: SessionID, _ input: SessionStateMachine.Input, playID: UInt64? = nil,
        _ make: (inout Session, SessionID) -> WireEvent
    ) throws(ControlError) -> SessionInfo {
        try state.withLock { state throws(ControlError) -> SessionInfo in
            guard var session = state.sessions[id] else { throw Self.unknown(id) }
            if let playID, session.machine.playID != playID {
                throw ControlError(
                    status: .conflict, code: "stale_play",
                    message: "play \(playID) is no longer the session's current play"
                        + (session.machine.playID.map { " (now \($0))" } ?? ""))
            }
            let action = session.machine.handle(input)
            if case .refuse(let reason) = action {
                throw ControlError(status: .conflict, code: "invalid_state", message: reason)
            }
            let event = make(&session, id)
            session.lastChange = .now
            state.sessions[id] = session
            state.pendingEvents.append(event)
            return Self.info(id, session)
        }
    }

    private static func info(_ id: SessionID, _ session: Session) -> SessionInfo {
        SessionInfo(
            sessionID: id, state: session.machine.state, playID: session.machine.playID, url: session.url,
            title: session.title, thumbnail: session.metadata?.thumbnail, durationMS: session.durationMS,
            positionMS: session.positionMS, volume: session.volume, passthrough: session.passthrough,
            frames: session.counters)
    }

    private static func checkVolume(_ volume: Int) throws(ControlError) {
        guard (0...1000).contains(volume) else {
            throw .badRequest("\"volume\" is a percentage from 0 to 1000, got \(volume)", code: "invalid_volume")
        }
    }

    private static func unknown(_ id: SessionID) -> ControlError {
        ControlError(status: .notFound, code: "session_not_found", message: "no session \"\(id)\" on this engine")
    }

    private static func finished(_ id: SessionID, _ playID: UInt64, _ reason: FinishReason) -> WireEvent {
        WireEvent(type: .finished, sessionID: id, playID: playID, reason: reason)
    }
}
