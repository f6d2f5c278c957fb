// The session controllers in memory: made on first use (from the database when the session was
// stored before), fed the engine's events in socket order, and released when a session has had
// no clients and nothing playing for a while (its stored state stays in the database).
import EngineAPI
import Foundation
import HTTPTypes
import Logging
import ServiceLifecycle
import ServiceSupport
import WireProtocol

actor SessionDirectory {
    private var controllers: [SessionID: SessionController] = [:]
    let store: SessionStore
    private let engine: any EngineControl
    private let database: (any SessionStorage)?
    private let writer: PersistenceWriter?
    /// Where controllers' background work runs (nil: plain tasks, in unit tests).
    private let background: BackgroundTasks?
    private let logger: Logger
    private(set) var released: UInt64 = 0
    /// Sessions in use by a command or a joining client (`using`): never released meanwhile.
    private var pins: [SessionID: Int] = [:]
    /// The most engine plays browser sessions may hold at once (nil: no limit); bots keep the rest.
    private let browserPlays: Int?
    /// A new session's loudness normalisation (TONEARM_NORMALIZE).
    let normalizeByDefault: Bool
    /// A pair of a cluster: a station may play on another pair (`placeStation`).
    let clustered: Bool
    /// In a cluster: where a station plays; when another pair plays it, its packets now come here
    /// for its followers on this pair (StationRelays).
    private(set) var placeStation: (@Sendable (SessionID) async throws(APIError) -> Placement)?

    func onStations(_ body: @escaping @Sendable (SessionID) async throws(APIError) -> Placement) { placeStation = body }
    /// Sessions a browser token has commanded, and those let start a play lately (their play may
    /// still be resolving, so it does not show as active yet).
    private var browserSessions: Set<SessionID> = []
    private var admitted: [SessionID: ContinuousClock.Instant] = [:]
    static let admissionHold: Duration = .seconds(60)
    /// Told of each session released from memory (a cluster's pair lets its lease go).
    private var onRelease: (@Sendable (SessionID) async -> Void)?
    /// Sessions handed to another pair whose moment has not come: this engine still plays them.
    private var handingOver: Set<SessionID> = []
    /// Sessions this pair is taking on (`reserve`, then `adopt`): until their controller is made
    /// from the stored snapshot, a client's `controller(for:)` waits for it rather than making
    /// one of its own, which would neither play what was playing nor know its play was lost.
    private var adopting: [SessionID: (done: Eventual<Bool>, holders: Int)] = [:]

    func onRelease(_ body: @escaping @Sendable (SessionID) async -> Void) { onRelease = body }

    /// Asked for a session whose play this pair's engine refused as full (a cluster's pair).
    private var roomElsewhere: (@Sendable (SessionID, SessionSnapshot) async -> Bool)?

    func onFull(_ body: @escaping @Sendable (SessionID, SessionSnapshot) async -> Bool) { roomElsewhere = body }

    init(
        store: SessionStore, engine: any EngineControl, database: (any SessionStorage)?, writer: PersistenceWriter?,
        background: BackgroundTasks? = nil, logger: Logger, browserPlays: Int? = nil, normalizeByDefault: Bool = true,
        clustered: Bool = false
    ) {
        self.clustered = clustered
        self.background = background
        self.browserPlays = browserPlays
        self.normalizeByDefault = normalizeByDefault
        self.store = store
        self.engine = engine
        self.database = database
        self.writer = writer
        self.logger = logger
    }

    private var sink: SessionSink {
        var sink = SessionSink(
            broadcast: { [store] id, json in store.broadcast(id, json) },
            persist: { [writer] id, snapshot in writer?.save(id, snapshot) })
        if let background { sink.spawn = { owner, job in background.spawn(owner: owner, job) } }
        sink.seekRoom = roomElsewhere
        return sink
    }

    /// The controller of `id`, loaded from the database or new (once a session being taken on
    /// has its own).
    func controller(for id: SessionID) async -> SessionController {
        // Waited out even by a caller going away: a controller made meanwhile would be the wrong one.
        if let adoption = adopting[id] { _ = await Task { await adoption.done.wait() }.value }
        if let controller = controllers[id] { return controller }
        var stored: SessionSnapshot?
        do {
            stored = try await database?.load(id)
        } catch {
            logger.error("could not read a stored session; starting it empty", metadata: ["session.id": "\(id)", "error": "\(error)"])
        }
        // Another caller may have made it while the database was read.
        if let controller = controllers[id] { return controller }
        let controller = SessionController(
            id: id, snapshot: stored ?? SessionSnapshot(normalize: normalizeByDefault), engine: engine, sink: sink)
        controllers[id] = controller
        store.register(id)
        // A follower stored so hears its station again.
        if let station = stored?.following.flatMap({ try? SessionID($0) }) {
            try? store.follow(id, station: station)
            if let placeStation { Task { _ = try? await placeStation(station) } }
        }
        return controller
    }

    /// The controller of `id` if it is in memory.
    func existing(_ id: SessionID) -> SessionController? { controllers[id] }

    /// Runs `body` with the controller of `id`, which is not released while `body` runs: a
    /// command in flight or a client on its way to subscribing keeps its session in memory.
    func using<T: Sendable>(_ id: SessionID, _ body: @Sendable (SessionController) async throws -> T) async throws -> T {
        let controller = await controller(for: id)
        // No suspension between getting the controller and pinning it.
        pins[id, default: 0] += 1
        defer {
            pins[id, default: 1] -= 1
            if pins[id] == 0 { pins.removeValue(forKey: id) }
        }
        return try await body(controller)
    }

    /// Every session in memory, with its client count, ordered by id (the operator's view).
    func listing() async -> [SessionView] {
        var states: [SessionView] = []
        for (id, controller) in controllers.sorted(by: { $0.key.description < $1.key.description }) {
            var state = await controller.state
            state.clients = store.subscriberCount(id)
            states.append(state)
        }
        return states
    }

    /// At start: brings back every stored session that was playing, so its events are followed.
    func restore() async {
        guard let database else { return }
        do {
            for (id, snapshot) in try await database.loadActive() where controllers[id] == nil {
                controllers[id] = SessionController(id: id, snapshot: snapshot, engine: engine, sink: sink)
                store.register(id)
                // Before any client comes: what plays, as if its `ready` had been seen (a play the
                // engine lost ends with the `finished` the reconciliation sends).
                if snapshot.queue.status == .playing, let track = snapshot.queue.currentTrack, let playID = snapshot.playID {
                    store.noteStillPlaying(
                        WireEvent(type: .ready, sessionID: id, playID: playID, url: track.url, title: track.title, durationMS: track.durationMS))
                }
            }
            logger.info("restored sessions", metadata: ["count": "\(controllers.count)"])
        } catch {
            logger.error("could not read stored sessions", metadata: ["error": "\(error)"])
        }
    }

    // MARK: A cluster's sessions coming and going

    /// A session this pair has just come to own (placed here, or taken over from a pair that
    /// stopped answering): its controller is made from the stored snapshot, and if it was playing
    /// on its last pair it plays here from the stored position. `stillOwned` is asked once the
    /// snapshot is read, with nothing between the answer and the controller's making: a pair
    /// that lost the session (or its right to play) meanwhile makes and plays nothing. Answers
    /// false when the snapshot could not be read: nothing is made (an empty controller would
    /// lose the session's queue, and might store its emptiness); the caller lets the session go.
    @discardableResult
    func adopt(_ id: SessionID, stillOwned: @Sendable () -> Bool = { true }) async -> Bool {
        reserve(id)
        defer { unreserve(id) }
        controllers.removeValue(forKey: id)
        var stored: SessionSnapshot?
        do {
            stored = try await database?.load(id)
        } catch {
            logger.error("could not read a session taken over; letting it go", metadata: ["session.id": "\(id)", "error": "\(error)"])
            return false
        }
        if let controller = controllers[id] { _ = controller; return true }  // made by a caller meanwhile
        guard stillOwned() else {
            logger.notice("a session taken over left this pair before it played", metadata: ["session.id": "\(id)"])
            return true
        }
        let (snapshot, resume) = (stored ?? SessionSnapshot(normalize: normalizeByDefault)).movedToAnotherPair()
        let controller = SessionController(id: id, snapshot: snapshot, engine: engine, sink: sink)
        controllers[id] = controller
        store.register(id)
        guard resume else { return true }
        logger.notice(
            "resuming a session taken over",
            metadata: ["session.id": "\(id)", "position.ms": "\(snapshot.positionMS)", "start.at.ms": "\(snapshot.startAtMS ?? 0)"])
        // A hand-over: the other pair plays until the agreed moment, this one from then on.
        let handOverAt = snapshot.startAtMS.map(Self.instant(ofWallClockMS:))
        if let handOverAt { store.keepCatchUp(id, until: handOverAt + .seconds(1)) }
        let resumeIt: @Sendable () async -> Void = { [logger] in
            do throws(APIError) {
                if let handOverAt {
                    try await controller.resumeHandedOver(heldUntil: handOverAt)
                } else {
                    try await controller.perform(.resume)
                }
            } catch {
                logger.warning("could not resume a session taken over", metadata: ["session.id": "\(id)", "error": "\(error.message)"])
            }
        }
        if let background { background.spawn(resumeIt) } else { Task(operation: resumeIt) }
        return true
    }

    /// `id` is about to be taken on here: clients wait for its controller until `adopt` has made
    /// it (or `unreserve`, when it is not taken on after all).
    func reserve(_ id: SessionID) {
        adopting[id, default: (Eventual(), 0)].holders += 1
    }

    func unreserve(_ id: SessionID) {
        guard let adoption = adopting[id] else { return }
        if adoption.holders > 1 {
            adopting[id]?.holders -= 1
        } else {
            adopting.removeValue(forKey: id)
            adoption.done.set(true)
        }
    }

    /// Wall-clock ms since 1970 (how two pairs name a hand-over's moment) on this process's clock.
    static func instant(ofWallClockMS ms: Int64) -> ContinuousClock.Instant {
        let now = Date().timeIntervalSince1970 * 1_000
        let ahead = min(max(Double(ms) - now, -60_000), 60_000)
        return ContinuousClock.now + .milliseconds(Int64(ahead))
    }

    static func wallClockMS() -> Int64 { Int64(Date().timeIntervalSince1970 * 1_000) }

    /// Asks this pair's engine to end `id`'s play at wall-clock `atMS`, for another pair to go
    /// on from the answered position then. Nil when the engine cannot (nothing heard).
    func scheduleHandOver(_ id: SessionID, atMS: Int64) async -> HandOverPoint? {
        guard controllers[id] != nil else { return nil }
        do throws(APIError) {
            return try await engine.handOver(id, atMS: atMS)
        } catch {
            logger.info("no scheduled hand-over", metadata: ["session.id": "\(id)", "error": "\(error.message)"])
            return nil
        }
    }

    /// A session handed to another pair at a moment still to come: its controller goes now (this
    /// pair decides nothing more about it), while its clients go on hearing this engine's last
    /// frames until `finishHandOver`.
    func detach(_ id: SessionID) {
        controllers.removeValue(forKey: id)
        browserSessions.remove(id)
        handingOver.insert(id)
    }

    /// The hand-over's moment came: the engine's play ended with `handed_over`, right after its
    /// last frame (or the caller's timer ran out first). The session's clients are told to
    /// connect again, which brings them to its new owner, and the play is stopped in case it
    /// somehow still runs (not awaited: an engine being stopped too may not answer).
    func finishHandOver(_ id: SessionID) {
        guard handingOver.remove(id) != nil, controllers[id] == nil else { return }
        moveAway(id)
    }

    /// The clients of a session that left this pair are told to connect again, and its play here
    /// is stopped. Not awaited: an engine that answers slowly (being stopped itself) must hold
    /// neither this directory nor a hand-over.
    private func moveAway(_ id: SessionID) {
        store.moveClients(of: id)
        store.release(id)
        Task { [engine, logger] in
            do throws(APIError) {
                try await engine.control(id, .stop)
            } catch {
                logger.debug("stopping a session that left", metadata: ["session.id": "\(id)", "error": "\(error.message)"])
            }
        }
    }

    /// The session's snapshot as of now, if it is in memory.
    func checkpoint(_ id: SessionID) async -> SessionSnapshot? {
        await controllers[id]?.checkpoint
    }

    /// A session this pair no longer owns: its play here stops, and its clients are told to
    /// reconnect, which brings them to its new owner.
    func drop(_ id: SessionID) async {
        guard controllers.removeValue(forKey: id) != nil else { return }
        browserSessions.remove(id)
        moveAway(id)
    }

    /// Hands an engine event to its session's controller; returns the auto-advance it leads to,
    /// for the caller to run in a task of its own.
    func dispatch(_ event: WireEvent) async -> (@Sendable () async -> Void)? {
        if event.type == .finished, event.code == "handed_over", handingOver.contains(event.sessionID) {
            finishHandOver(event.sessionID)
            return nil
        }
        guard let controller = controllers[event.sessionID], let pending = await controller.handle(event) else { return nil }
        return { await controller.advance(pending) }
    }

    /// The plays the Router believes the engine is running: session → play id.
    func activePlays() async -> [SessionID: UInt64] {
        var plays: [SessionID: UInt64] = [:]
        for (id, controller) in controllers {
            if let playID = await controller.activePlayID { plays[id] = playID }
        }
        return plays
    }

    /// Lets a browser's command through, or refuses one that would start a play (503 with
    /// Retry-After) while browser sessions already hold `browserPlays` of the engine's plays.
    /// The count and the admission happen without a suspension between them, so concurrent
    /// plays cannot overshoot the limit.
    func admitBrowser(_ command: SessionCommand, on id: SessionID) async throws(APIError) {
        browserSessions.insert(id)
        guard let limit = browserPlays, command.mayStartPlay else { return }
        if await controllers[id]?.activePlayID != nil { return }  // it holds its play already
        var holding = Set<SessionID>()
        for other in browserSessions where other != id {
            if await controllers[other]?.activePlayID != nil { holding.insert(other) }
        }
        let now = ContinuousClock.now
        // An admission stops counting on its own once its play shows as active (or after the
        // hold, if it never started): a stopped play frees its place at once.
        admitted = admitted.filter { now - $0.value < Self.admissionHold && !holding.contains($0.key) }
        holding.formUnion(admitted.keys)
        holding.remove(id)
        guard holding.count < limit else {
            throw APIError(
                status: .serviceUnavailable, code: "browser_share_exhausted",
                message: "browser listeners may hold \(limit) of the engine's plays at once and all are in use; "
                    + "try again in a minute", retryAfterSeconds: 30)
        }
        admitted[id] = now
    }

    /// Releases sessions with no clients and nothing playing for `idleFor`.
    func releaseStale(idleFor: Duration) async {
        let cutoff = ContinuousClock.now - idleFor
        for (id, controller) in controllers {
            guard pins[id] == nil, store.subscriberCount(id) == 0, store.followerCount(id) == 0, await controller.isIdle,
                await controller.lastActive < cutoff, (store.lastSeen(id) ?? cutoff) <= cutoff
            else { continue }
            // The awaits above let others in: a client may have joined or a command started.
            // Checked again with no suspension before the removal.
            guard pins[id] == nil, controllers[id] === controller, store.subscriberCount(id) == 0, store.followerCount(id) == 0
            else { continue }
            controllers.removeValue(forKey: id)
            browserSessions.remove(id)
            store.release(id)
            released += 1
            logger.debug("released stale session", metadata: ["session.id": "\(id)"])
            await onRelease?(id)
        }
    }
}

/// Feeds engine events to the directory in order, runs the auto-advances they lead to as child
/// tasks (cancelled at shutdown), and releases stale sessions on a timer.
struct SessionUpkeep: Service {
    let directory: SessionDirectory
    let events: AsyncStream<WireEvent>
    let staleAfter: Duration
    let sweepEvery: Duration

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    await withDiscardingTaskGroup { advances in
                        for await event in events {
                            if let advance = await directory.dispatch(event) { advances.addTask(operation: advance) }
                        }
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: sweepEvery)
                        await directory.releaseStale(idleFor: staleAfter)
                    }
                }
            }
        }
    }
}
