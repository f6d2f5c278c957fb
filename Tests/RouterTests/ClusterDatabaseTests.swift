// The cluster's statements against a real PostgreSQL (Debian's, started by the test): how far a
// session taken over played after its last checkpoint, when a pair's heartbeats count as steady,
// a statement past its deadline given up without holding the next one, and placements made at
// once from several pairs spread over them.
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite(.serialized, .timeLimit(.minutes(2))) struct ClusterDatabaseTests {
    static var postgresInstalled: Bool { PostgresServer.binaries != nil }

    /// Runs `body` with one database handle per pair name, all on a fresh server.
    func withPairs(_ names: [String], _ body: ([ClusterDatabase]) async throws -> Void) async throws {
        let server = try PostgresServer()
        defer { server.stop() }
        let hosts = try DatabaseHosts(url: server.url, logger: Logger(label: "test"))
        let running = Task { await hosts.run() }
        defer { running.cancel() }
        let handles = names.map { ClusterDatabase(hosts: hosts, pairID: $0, logger: Logger(label: "test")) }
        try await handles[0].migrate()
        try await body(handles)
    }

    func beat(_ pair: String) -> ClusterDatabase.Heartbeat {
        .init(address: "http://\(pair)", sessions: 0, maxSessions: 60, load: 0, lateFrames: 0, draining: false)
    }

    /// The checkpoint of a session taken over moves on by what its last owner played after
    /// writing it (until its last renewal), not by the time its new owner has held it: the new
    /// owner's renewals leave that measure alone until it stores a checkpoint of its own. (It
    /// did not: a pair that learned of the session by renewing moved it on by the whole failover,
    /// the outliers of docs/cluster.md.)
    @Test(.enabled(if: postgresInstalled)) func aTakenOverSessionMovesOnByWhatItsLastOwnerPlayed() async throws {
        try await withPairs(["a", "b", "c"]) { pairs in
            let (a, b, c) = (pairs[0], pairs[1], pairs[2])
            let id = try SessionID("guild")
            let lease = Duration.milliseconds(600)
            let epoch = try #require(try await a.assign(id, to: "a", expected: nil, lease: lease, snapshot: ""))
            #expect(try await a.store(id, json: "{}", active: true, epoch: epoch))
            try await Task.sleep(for: .milliseconds(300))
            _ = try await a.round(beat("a"), lease: lease, gap: .seconds(1), within: .seconds(2))
            // Pair a dies; its lease runs out; c gives the orphan to b, which learns of it by renewing.
            try await Task.sleep(for: .milliseconds(900))
            let orphan = try #require(try await c.orphans().first)
            let taken = try #require(try await c.assign(id, to: "b", expected: orphan.ownership, lease: lease, snapshot: ""))
            try await Task.sleep(for: .milliseconds(200))
            #expect(try await b.round(beat("b"), lease: lease, gap: .seconds(1), within: .seconds(2))[id] == taken)
            let played = try #require(try await b.snapshot(of: id)).playedAfterMS
            #expect((250...600).contains(played), "the checkpoint moves on by \(played) ms; pair a played 300 ms after it")
            // Once b has stored its own checkpoint, its renewals measure from it.
            #expect(try await b.store(id, json: "{}", active: true, epoch: taken))
            try await Task.sleep(for: .milliseconds(200))
            _ = try await b.round(beat("b"), lease: lease, gap: .seconds(1), within: .seconds(2))
            let own = try #require(try await b.snapshot(of: id)).playedAfterMS
            #expect((150...450).contains(own), "\(own) ms after b's own checkpoint")
        }
    }

    /// A pair is steady once its heartbeats have come, each within the gap of the one before, for
    /// the time asked; a gap starts its run again (a pair back from a cut, or a heartbeat held up
    /// in one and delivered late).
    @Test(.enabled(if: postgresInstalled)) func aPairIsSteadyAfterARunOfHeartbeatsAndAGapStartsItAgain() async throws {
        try await withPairs(["a", "b"]) { pairs in
            let (a, b) = (pairs[0], pairs[1])
            func steady() async throws -> Bool? {
                try await b.livePairs(within: .seconds(5), steadyFor: .milliseconds(800)).first { $0.id == "a" }?.steady
            }
            for _ in 0..<5 {
                _ = try await a.round(beat("a"), lease: .seconds(3), gap: .milliseconds(400), within: .seconds(2))
                try await Task.sleep(for: .milliseconds(250))
            }
            #expect(try await steady() == true)
            try await Task.sleep(for: .milliseconds(600))
            _ = try await a.round(beat("a"), lease: .seconds(3), gap: .milliseconds(400), within: .seconds(2))
            #expect(try await steady() == false, "a heartbeat after a gap counted as steady")
            for _ in 0..<4 {
                try await Task.sleep(for: .milliseconds(250))
                _ = try await a.round(beat("a"), lease: .seconds(3), gap: .milliseconds(400), within: .seconds(2))
            }
            #expect(try await steady() == true)
        }
    }

    /// A statement past its deadline fails then, its connection closed; the next one is answered
    /// on another connection at once.
    @Test(.enabled(if: postgresInstalled)) func aStatementPastItsDeadlineIsGivenUpAndHoldsNothing() async throws {
        try await withPairs(["a"]) { pairs in
            let started = ContinuousClock.now
            await #expect(throws: TimeoutError.self) {
                try await pairs[0].hosts.run(within: .milliseconds(200)) { connection in
                    try await connection.query("SELECT pg_sleep(5)", logger: Logger(label: "test"))
                }
            }
            #expect(ContinuousClock.now - started < .seconds(1))
            let pairsSeen: [ClusterDatabase.Pair]
            do {
                pairsSeen = try await pairs[0].livePairs(within: .seconds(5), steadyFor: .seconds(1))
            } catch {
                // PostgresNIO's description hides the details (it failed once in CI, 2026-11-27).
                Issue.record("the statement after the timed-out one failed: \(String(reflecting: error))")
                return
            }
            #expect(pairsSeen.isEmpty && ContinuousClock.now - started < .seconds(2))
        }
    }
    /// Sessions placed at once from three pairs spread over them as if placed one by one: each
    /// placement reads the counts under the lock every placement queues for. (Read outside it,
    /// each saw the same counts: six guilds placed at once from three pairs went 4/2/0 and 5/1/0
    /// in ClusterEndToEndTests.)
    @Test(.enabled(if: postgresInstalled)) func sessionsPlacedAtOnceFromSeveralPairsSpreadOverThem() async throws {
        try await withPairs(["a", "b", "c"]) { pairs in
            for pair in pairs {
                _ = try await pair.round(beat(pair.pairID), lease: .seconds(5), gap: .seconds(1), within: .seconds(2))
            }
            let placed = try await withThrowingTaskGroup(of: String.self) { group in
                for index in 0..<12 {
                    let pair = pairs[index % pairs.count]
                    group.addTask {
                        let id = try SessionID("guild-\(index)")
                        let (target, epoch) = try await pair.placing(
                            id, pairsWithin: .seconds(5), steadyFor: .zero, lease: .seconds(5)
                        ) { _, live in
                            let best = LoadScore.best(of: live, for: id.description)?.id
                            return (best, best)
                        }
                        return epoch == nil ? "none" : target ?? "none"
                    }
                }
                return try await group.reduce(into: [String: Int]()) { counts, target in counts[target, default: 0] += 1 }
            }
            #expect(placed == ["a": 4, "b": 4, "c": 4], "placed: \(placed)")
        }
    }

    /// A pair's own session whose lease ran out, read so by one of its placements, and renewed by
    /// its own round before that placement writes: the placement's assignment to another pair
    /// must find the session live again and change nothing. (It did: `owner = me` let it through,
    /// the round resumed the guild here, the assignment gave it to another pair, and both played
    /// it until the next round, once in nine runs of the database failover with 60 guilds.)
    @Test(.enabled(if: postgresInstalled)) func aPlacementDoesNotGiveAwayASessionItsOwnPairRenewedMeanwhile() async throws {
        try await withPairs(["a", "b"]) { pairs in
            let (a, b) = (pairs[0], pairs[1])
            let id = try SessionID("guild")
            let lease = Duration.milliseconds(400)
            for pair in pairs { _ = try await pair.round(beat(pair.pairID), lease: lease, gap: .seconds(1), within: .seconds(2)) }
            let epoch = try #require(try await a.assign(id, to: "a", expected: nil, lease: lease, snapshot: ""))
            #expect(try await a.store(id, json: "{}", active: true, epoch: epoch))
            try await Task.sleep(for: .milliseconds(600))
            let read = try #require(try await a.ownership(of: id))
            #expect(!read.live && read.owner == "a")
            // Pair a's round renews what is still its own, then its placement writes what it decided.
            #expect(try await a.round(beat("a"), lease: .seconds(5), gap: .seconds(1), within: .seconds(2))[id] == epoch)
            let given = try await a.assign(id, to: "b", expected: read, lease: .seconds(5), snapshot: "")
            #expect(given == nil, "the session went to b at epoch \(given ?? 0) while a's lease on it was live")
            let after = try #require(try await b.ownership(of: id))
            #expect(after.owner == "a" && after.epoch == epoch && after.live, "\(after)")
        }
    }
}
