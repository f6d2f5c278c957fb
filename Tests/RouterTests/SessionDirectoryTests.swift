// The sessions in memory: releasing stale ones against what is using them (a command in flight or
// a client on its way to subscribing keeps its session), loading stored ones, handing events on,
// the browsers' share of the engine, and what reconciliation ends after the engine restarted.
import HTTPTypes
import Logging
import ServiceSupport
import Synchronization
import TestSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct SessionDirectoryTests {
    @Test func aSessionInUseIsNotReleasedUnderIt() async throws {
        let directory = SessionDirectory(
            store: SessionStore(), engine: ScriptedEngine(), database: nil, writer: nil, logger: Logger(label: "test"))
        let id = try SessionID("joining")
        let first = try await directory.using(id) { $0 }
        // A client is between getting the controller and subscribing while the sweep runs.
        let (entered, enter) = AsyncStream<Void>.makeStream()
        let (leave, leaving) = AsyncStream<Void>.makeStream()
        let joining = Task {
            try await directory.using(id) { controller in
                enter.yield()
                for await _ in leave { break }
                return controller
            }
        }
        for await _ in entered { break }
        await directory.releaseStale(idleFor: .zero)
        #expect(await directory.released == 0, "released while in use")
        #expect(await directory.existing(id) === first)
        leaving.yield()
        #expect(try await joining.value === first)
        // Once nobody uses it, it goes.
        try await Task.sleep(for: .milliseconds(5))
        await directory.releaseStale(idleFor: .zero)
        #expect(await directory.released == 1)
        #expect(await directory.existing(id) == nil)
    }

    /// TONEARM_NORMALIZE decides a new session's loudness normalisation; a stored session keeps its own.
    @Test func aNewSessionTakesTheConfiguredNormalization() async throws {
        #expect(try RouterConfiguration(environment: [:]).normalizeByDefault)
        #expect(try RouterConfiguration(environment: ["TONEARM_NORMALIZE": "0"]).normalizeByDefault == false)
        #expect(throws: RouterConfigurationError.self) { try RouterConfiguration(environment: ["TONEARM_NORMALIZE": "maybe"]) }
        let off = SessionDirectory(
            store: SessionStore(), engine: ScriptedEngine(), database: nil, writer: nil, logger: Logger(label: "test"),
            normalizeByDefault: false)
        #expect(await off.controller(for: try SessionID("new")).state.normalize == false)
        let on = SessionDirectory(
            store: SessionStore(), engine: ScriptedEngine(), database: nil, writer: nil, logger: Logger(label: "test"))
        #expect(await on.controller(for: try SessionID("new")).state.normalize)
    }

    /// Snapshots read only once the test lets them: a cluster's PostgreSQL answering slowly.
    final class SlowStorage: SessionStorage {
        let stored: SessionSnapshot
        let (opened, open) = AsyncStream<Void>.makeStream()
        let reads = Atomic<Int>(0)
        init(_ stored: SessionSnapshot) { self.stored = stored }
        func load(_ id: SessionID) async throws -> SessionSnapshot? {
            reads.add(1, ordering: .relaxed)
            for await _ in opened { break }
            return stored
        }
        func loadActive() async throws -> [SessionID: SessionSnapshot] { [:] }
        func save(_ batch: [SessionID: SessionSnapshot]) async throws {}
        func saveBlocking(_ batch: [SessionID: SessionSnapshot]) throws {}
    }

    /// A client that finds a session owned here while the pair is still reading its snapshot to
    /// take it on gets the controller the adoption makes, which resumes the play the last pair
    /// lost; it does not make one of its own from the stored snapshot (which played nothing, and
    /// the adoption then left it so: a guild silent for minutes in the chaos run).
    @Test func aClientArrivingDuringAnAdoptionGetsTheAdoptedController() async throws {
        var queue = SessionQueue()
        _ = queue.handle(.enqueue([Track(url: "a.mp3")]))
        _ = queue.handle(.ready(generation: 1))
        let storage = SlowStorage(SessionSnapshot(queue: queue, playID: 3))
        let engine = ScriptedEngine()
        let directory = SessionDirectory(
            store: SessionStore(), engine: engine, database: storage, writer: nil, logger: Logger(label: "test"))
        let id = try SessionID("taken-over")
        await directory.reserve(id)  // the pair claims it, then reads it
        let adopting = Task { await directory.adopt(id) }
        let client = Task { await directory.controller(for: id) }
        try await Task.sleep(for: .milliseconds(50))
        await directory.unreserve(id)
        storage.open.yield()
        storage.open.yield()
        #expect(await adopting.value)
        let controller = await client.value
        #expect(await directory.existing(id) === controller)
        #expect(storage.reads.load(ordering: .relaxed) == 1, "the client read the snapshot for a controller of its own")
        #expect(await eventually(timeout: .seconds(5)) { engine.calls.contains { $0.hasPrefix("play a.mp3") } }, "\(engine.calls)")
    }

    func directory(
        engine: ScriptedEngine = ScriptedEngine(), store: SessionStore = SessionStore(), database: SessionDatabase? = nil,
        browserPlays: Int? = nil
    ) -> SessionDirectory {
        SessionDirectory(
            store: store, engine: engine, database: database, writer: nil, logger: Logger(label: "test"),
            browserPlays: browserPlays)
    }

    @Test func aStoredSessionIsLoadedOnFirstUseAndPlayingOnesAtStart() async throws {
        let database = try SessionDatabase(path: ":memory:")
        let playing = try SessionID("was-playing"), stopped = try SessionID("was-stopped")
        var queue = SessionQueue()
        _ = queue.handle(.enqueue([Track(url: "a.mp3")]))
        _ = queue.handle(.ready(generation: 1))
        try await database.save([playing: SessionSnapshot(queue: queue, playID: 3), stopped: SessionSnapshot(volume: 30)])
        let store = SessionStore()
        let directory = directory(store: store, database: database)
        await directory.restore()
        // Restored at start: its events are followed (the store routes them) before anyone asks.
        #expect(await directory.existing(playing) != nil)
        #expect(store.findBySessionId(playing) != nil)
        #expect(await directory.activePlays() == [playing: 3])
        #expect(await directory.existing(stopped) == nil)
        // Loaded when first used, with its settings.
        #expect(await directory.controller(for: stopped).state.volume == 30)
    }

    @Test func anEventReachesItsSessionAndAnAutoAdvanceIsLeftToTheCaller() async throws {
        let engine = ScriptedEngine()
        let directory = directory(engine: engine)
        let id = try SessionID("guild-1"), other = try SessionID("guild-2")
        try await directory.using(id) { try await $0.perform(.enqueue(url: "list")) }
        try await directory.using(other) { try await $0.perform(.enqueue(url: "solo.mp3")) }
        // Ready: the track after it is asked for, by the caller too.
        let ask = try #require(await directory.dispatch(WireEvent(type: .ready, sessionID: id, playID: 1)))
        #expect(engine.nexts.isEmpty)
        await ask()
        #expect(engine.nexts == ["list-2.mp3 0"])
        // The engine did not join it (it could not open it, say): the queue starts it as a play.
        let advance = try #require(
            await directory.dispatch(WireEvent(type: .finished, sessionID: id, playID: 1, reason: .finished)))
        #expect(engine.plays == ["play list-1.mp3", "play solo.mp3"], "nothing started before the caller ran it")
        await advance()
        #expect(engine.plays.last == "play list-2.mp3")
        #expect(await directory.existing(other)?.state.status == "starting", "the other session is untouched")
        // An event of a session not in memory is dropped.
        #expect(await directory.dispatch(WireEvent(type: .finished, sessionID: try SessionID("gone"), playID: 9)) == nil)
    }

    @Test func browsersShareOnlyTheirPartOfTheEngine() async throws {
        let directory = directory(browserPlays: 1)
        let first = try SessionID("tab-1"), second = try SessionID("tab-2")
        try await directory.admitBrowser(.play(url: "a.mp3"), on: first)
        try await directory.using(first) { try await $0.perform(.play(url: "a.mp3")) }
        // The one browser play is held: another tab may not start one, but may do anything else.
        let refused = await #expect(throws: APIError.self) { try await directory.admitBrowser(.play(url: "b.mp3"), on: second) }
        #expect(refused?.code == "browser_share_exhausted" && refused?.status == .serviceUnavailable)
        #expect(refused?.retryAfterSeconds != nil)
        try await directory.admitBrowser(.loop(.queue), on: second)
        // The holder may change its own play.
        try await directory.admitBrowser(.play(url: "c.mp3"), on: first)
        // Once it stops, the place is free at once.
        try await directory.using(first) { try await $0.perform(.stop) }
        try await directory.admitBrowser(.play(url: "b.mp3"), on: second)
    }

    @Test func reconciliationEndsOnlyThePlaysTheEngineLost() async throws {
        let engine = ScriptedEngine()
        let store = SessionStore()
        let directory = directory(engine: engine, store: store)
        let (events, sink) = AsyncStream<WireEvent>.makeStream()
        store.forwardEvents(to: sink)
        let kept = try SessionID("kept"), lost = try SessionID("lost"), replaced = try SessionID("replaced")
        for id in [kept, lost, replaced] {
            try await directory.using(id) { try await $0.perform(.play(url: "\(id).mp3")) }
        }
        let listener = store.subscribe(lost)
        // The engine restarted: it runs `kept`'s play, a newer play on `replaced`, nothing on `lost`.
        engine.setActivePlays([kept: 1, replaced: 99])
        await EngineReconciliation.run(store: store, directory: directory, engine: engine, logger: Logger(label: "test"))
        sink.finish()
        var ended: [String] = []
        for await event in events {
            ended.append("\(event.sessionID) \(event.code ?? "")")
            _ = await directory.dispatch(event)
        }
        #expect(ended.sorted() == ["lost engine_restarted", "replaced engine_restarted"])
        #expect(await directory.existing(lost)?.state.status == "idle")
        #expect(await directory.existing(kept)?.state.status == "starting")
        // The listener of the lost session is told why it went quiet.
        var iterator = listener.messages.makeAsyncIterator()
        guard case .event(let json) = await iterator.next() else { Issue.record("no event"); return }
        #expect(json.contains("engine_restarted"))

        // An engine that cannot be asked ends nothing.
        engine.setActivePlays(nil)
        await EngineReconciliation.run(store: store, directory: directory, engine: engine, logger: Logger(label: "test"))
        #expect(await directory.activePlays().keys.sorted { $0.description < $1.description } == [kept])
    }
}
