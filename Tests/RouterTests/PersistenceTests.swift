// Sessions in SQLite: what is written comes back after a restart (a new database on the same
// file), only sessions that were playing are restored at start, a row that no longer decodes is
// skipped rather than stopping the Router, and the writer keeps only the newest state of a
// session and writes what is left when it stops.
import EngineAPI
import Foundation
import Logging
import Testing
import TestSupport
import WireProtocol

@testable import TonearmRouter

@Suite struct PersistenceTests {
    func snapshot(_ urls: [String], playing: Bool, volume: Int = 100, positionMS: Int64 = 0) -> SessionSnapshot {
        var queue = SessionQueue()
        _ = queue.handle(.enqueue(urls.map { Track(url: $0, title: "Title of \($0)") }, autoplay: playing))
        if playing { _ = queue.handle(.ready(generation: queue.generation, durationMS: 60_000)) }
        return SessionSnapshot(queue: queue, volume: volume, positionMS: positionMS, playID: playing ? 7 : nil)
    }

    @Test func whatIsSavedComesBackAfterARestart() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("data/tonearm.sqlite")
        let a = try SessionID("guild-a"), b = try SessionID("tab-b")
        let playing = snapshot(["a.mp3", "b.mp3"], playing: true, volume: 40, positionMS: 12_345)
        let stopped = snapshot(["c.mp3"], playing: false)
        do {
            let database = try SessionDatabase(path: path)
            try await database.save([a: playing, b: stopped])
        }
        let reopened = try SessionDatabase(path: path)
        #expect(try await reopened.load(a) == playing)
        #expect(try await reopened.load(b) == stopped)
        #expect(try await reopened.load(try SessionID("never-seen")) == nil)
        // Only what was playing (or paused) is brought back at start.
        #expect(try await reopened.loadActive() == [a: playing])
    }

    @Test func aSecondSaveReplacesTheFirst() async throws {
        let database = try SessionDatabase(path: ":memory:")
        let id = try SessionID("guild-a")
        try await database.save([id: snapshot(["a.mp3"], playing: true)])
        let later = snapshot(["a.mp3", "b.mp3"], playing: false, volume: 5)
        try await database.save([id: later])
        #expect(try await database.load(id) == later)
        #expect(try await database.loadActive().isEmpty)
    }

    @Test func aRowThatNoLongerDecodesIsSkippedAtStart() async throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("tonearm.sqlite")
        let good = try SessionID("good")
        let database = try SessionDatabase(path: path)
        try await database.save([good: snapshot(["a.mp3"], playing: true)])
        // Rows Tonearm would never write, written beside it on a connection of the test's own.
        try SQLiteConnection(path: path).execute(
            "INSERT INTO session (id, snapshot, updated_at) VALUES ('broken', '{\"queue\": 3}', 0), ('not an id!', '{}', 0)")
        #expect(try await database.loadActive().keys.map(\.description) == ["good"])
        await #expect(throws: (any Error).self) { try await database.load(try SessionID("broken")) }
    }

    @Test func theWriterKeepsTheNewestAndFlushesWhenItStops() async throws {
        let database = try SessionDatabase(path: ":memory:")
        // A delay far longer than the test: only the shutdown can have written.
        let writer = PersistenceWriter(database: database, logger: Logger(label: "test"), delay: .seconds(3600))
        let running = Task { try await writer.run() }
        let id = try SessionID("guild-a")
        for volume in 0...50 { writer.save(id, snapshot(["a.mp3"], playing: true, volume: volume)) }
        #expect(try await database.load(id) == nil, "written before the delay")
        running.cancel()
        try await running.value
        #expect(try await database.load(id)?.volume == 50)
    }

    @Test func theWriterWritesABurstOnceTheDelayHasPassed() async throws {
        let database = try SessionDatabase(path: ":memory:")
        let writer = PersistenceWriter(database: database, logger: Logger(label: "test"), delay: .milliseconds(20))
        let running = Task { try await writer.run() }
        defer { running.cancel() }
        let ids = try (0..<20).map { try SessionID("s\($0)") }
        for id in ids { writer.save(id, snapshot(["\(id).mp3"], playing: true)) }
        #expect(try await eventually(timeout: .seconds(30)) { try await database.loadActive().count == ids.count })
    }

    /// Filters are stored with the session; a row written before they existed still loads
    /// (without them) instead of being skipped as undecodable.
    @Test func filtersAreStoredAndOlderRowsStillLoad() throws {
        var withFilters = snapshot(["a.mp3"], playing: true, volume: 40)
        withFilters.filters = Filters(equalizer: [EqualizerBand(band: 8, gain: 0.25)])
        let stored = try JSONEncoder().encode(withFilters)
        #expect(try JSONDecoder().decode(SessionSnapshot.self, from: stored) == withFilters)
        var older = try #require(try JSONSerialization.jsonObject(with: stored) as? [String: Any])
        older.removeValue(forKey: "filters")
        let loaded = try JSONDecoder().decode(SessionSnapshot.self, from: try JSONSerialization.data(withJSONObject: older))
        #expect(loaded.filters == Filters() && loaded.volume == 40 && loaded.queue == withFilters.queue)
    }
}
