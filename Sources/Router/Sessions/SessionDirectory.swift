// The session controllers in memory: made on first use (from the database when the session was
// stored before), fed the engine's events in socket order, and released when a session has had
// no clients and nothing playing for a while (its stored state stays in the database).
import Logging
import ServiceLifecycle
import WireProtocol

actor SessionDirectory {
    private var controllers: [SessionID: SessionController] = [:]
    private let store: SessionStore
    private let engine: any EngineControl
    private let database: SessionDatabase?
    private let writer: PersistenceWriter?
    private let logger: Logger
    private(set) var released: UInt64 = 0

    init(store: SessionStore, engine: any EngineControl, database: SessionDatabase?, writer: PersistenceWriter?, logger: Logger) {
        self.store = store
        self.engine = engine
        self.database = database
        self.writer = writer
        self.logger = logger
    }

    private var sink: SessionSink {
        SessionSink(
            broadcast: { [store] id, json in store.broadcast(id, json) },
            persist: { [writer] id, snapshot in writer?.save(id, snapshot) })
    }

    /// The controller of `id`, loaded from the database or new.
    func controller(for id: SessionID) async -> SessionController {
        if let controller = controllers[id] { return controller }
        var stored: SessionSnapshot?
        do {
            stored = try await database?.load(id)
        } catch {
            logger.error("could not read a stored session; starting it empty", metadata: ["session.id": "\(id)", "error": "\(error)"])
        }
        // Another caller may have made it while the database was read.
        if let controller = controllers[id] { return controller }
        let controller = SessionController(id: id, snapshot: stored ?? SessionSnapshot(), engine: engine, sink: sink)
        controllers[id] = controller
        store.register(id)
        return controller
    }

    /// The controller of `id` if it is in memory.
    func existing(_ id: SessionID) -> SessionController? { controllers[id] }

    /// Every session in memory, with its client count, ordered by id (the operator's view).
    func listing() async -> [SessionState] {
        var states: [SessionState] = []
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
            }
            logger.info("restored sessions", metadata: ["count": "\(controllers.count)"])
        } catch {
            logger.error("could not read stored sessions", metadata: ["error": "\(error)"])
        }
    }

    /// Hands an engine event to its session's controller.
    func dispatch(_ event: WireEvent) async {
        await controllers[event.sessionID]?.handle(event)
    }

    /// The plays the Router believes the engine is running: session → play id.
    func activePlays() async -> [SessionID: UInt64] {
        var plays: [SessionID: UInt64] = [:]
        for (id, controller) in controllers {
            if let playID = await controller.activePlayID { plays[id] = playID }
        }
        return plays
    }

    /// Releases sessions with no clients and nothing playing for `idleFor`.
    func releaseStale(idleFor: Duration) async {
        let cutoff = ContinuousClock.now - idleFor
        for (id, controller) in controllers {
            guard store.subscriberCount(id) == 0, await controller.isIdle, await controller.lastActive < cutoff,
                (store.lastSeen(id) ?? cutoff) <= cutoff
            else { continue }
            controllers.removeValue(forKey: id)
            store.release(id)
            released += 1
            logger.debug("released stale session", metadata: ["session.id": "\(id)"])
        }
    }
}

/// Feeds engine events to the directory in order, and releases stale sessions on a timer.
struct SessionUpkeep: Service {
    let directory: SessionDirectory
    let events: AsyncStream<WireEvent>
    let staleAfter: Duration
    let sweepEvery: Duration

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await event in events { await directory.dispatch(event) }
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
