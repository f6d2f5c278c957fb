// The cluster's database is not a single point of failure. Twice: the whole database away for
// longer than a lease (one PostgreSQL frozen, as a restart or a failover looks to the pairs), and
// PostgreSQL kept by pg_auto_failover (a monitor, a primary and a synchronous standby) with the
// primary's host killed. Each guild is silent for no more than the fence plus the database's own
// outage, never played by two pairs, and what was stored before is still there after.
import Foundation
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(4))) struct DatabaseFailoverEndToEndTests {
    /// Every pair stops its guilds at the fence (2 s) while the database does not answer; when it
    /// does again, every lease is over at once: each pair renews its own and plays them on, and
    /// no pair places another's orphans (or a reconnecting bot's guild) before it has reached the
    /// database for a lease. Every guild is played by one pair, the one it was on.
    /// Opt-in (TONEARM_DATABASE_OUTAGE=1) until it has more runs behind it: it failed 8 of 9
    /// runs before statements' deadlines were bounded (docs/cluster.md, "PostgreSQL highly
    /// available").
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled && ProcessInfo.processInfo.environment["TONEARM_DATABASE_OUTAGE"] != nil))
    func theWholeDatabaseIsAwayAndEveryGuildComesBackOnOnePair() async throws {
        let database = try PostgresServer()
        let scenario = try await Scenario(database: database)
        defer { scenario.close() }
        let before = try scenario.cluster.owners()
        let frozenAt = ContinuousClock.now
        database.freeze(true)
        defer { database.freeze(false) }
        let watched = try await scenario.watch(from: frozenAt) { elapsed in
            if elapsed >= .seconds(7) { database.freeze(false) }
            return elapsed >= .seconds(7)
        }
        database.freeze(false)
        try await scenario.check(watched, from: frozenAt, limit: 7 + 3)
        print("database outage: 7 s frozen; guild silences \(watched.silences.map { String(format: "%.2f", $0) }) s")
        // Every pair saw the outage, so each plays its own guilds on: none taken by the first back.
        let after = try scenario.cluster.owners()
        let moved = scenario.guilds.filter { before[$0] != after[$0] }
        print("database outage: \(moved.count) of \(scenario.guilds.count) guilds moved to another pair")
        #expect(moved.isEmpty, "moved: \(moved.map { "\($0) \(before[$0] ?? "-") → \(after[$0] ?? "-")" })")
        await scenario.cluster.stop()
        database.stop()
    }

    /// Opt-in (TONEARM_DATABASE_FAILOVER=1): pg_auto_failover's setup takes 15–90 s (docs/cluster.md).
    @Test(.enabled(if: PostgresHA.installed && ProcessInfo.processInfo.environment["TONEARM_DATABASE_FAILOVER"] != nil))
    func theDatabasesPrimaryDiesAndEveryGuildPlaysOn() async throws {
        let database = try PostgresHA()
        let scenario = try await Scenario(database: database)
        defer { scenario.close() }
        let primary = try #require(database.primary(), "no node takes writes")
        let killedAt = ContinuousClock.now
        database.kill(primary)
        var promotedAfter: Duration?
        let watched = try await scenario.watch(from: killedAt) { elapsed in
            if promotedAfter == nil, database.primary() != nil { promotedAfter = elapsed }
            return promotedAfter != nil
        }
        let failover = try #require(promotedAfter, "the standby never took writes")
        #expect(database.primary() == 1 - primary)
        try await scenario.check(watched, from: killedAt, limit: 15)
        print("database failover: writable again after \(failover); guild silences \(watched.silences.map { String(format: "%.2f", $0) }) s")
        await scenario.cluster.stop()
        database.stop()
    }

    /// Three pairs, nine guilds (TONEARM_DATABASE_GUILDS of them when set: issue 53 asks for 60)
    /// each with its own bot and tone and a track queued, all heard.
    final class Scenario: Sendable {
        static let tones = [440, 550, 660, 770, 880, 990]
        let cluster: PairCluster
        let guilds: [String]
        let bots: [BalancedListener]

        init(database: any ClusterDatabaseServer) async throws {
            let cluster = try PairCluster(count: 3, database: database)
            let count = Int(ProcessInfo.processInfo.environment["TONEARM_DATABASE_GUILDS"] ?? "").map { min(max($0, 1), 90) } ?? 9
            let guilds = (0..<count).map { "db-guild-\($0)" }
            self.cluster = cluster
            self.guilds = guilds
            try await cluster.start()
            for index in cluster.pairs.indices {
                #expect(await eventually(timeout: .seconds(15)) { await cluster.pairs[index].clusterReady() }, "pair \(index) never renewed")
                // Placement spreads the guilds only over pairs whose heartbeats have been steady for a lease.
                #expect(await eventually(timeout: .seconds(15)) { (try? cluster.steady(index)) == true }, "pair \(index) never became steady")
            }
            bots = guilds.enumerated().map { index, guild in
                BalancedListener(session: guild, addresses: { [cluster] in cluster.liveAddresses }, start: index)
            }
            #expect(await eventually(timeout: .seconds(10)) { self.bots.allSatisfy { $0.connectionCount > 0 } })
            for (index, guild) in guilds.enumerated() {
                let answer = try await cluster.pairs[index % 3].play(guild, "tone-\(Self.tones[index % Self.tones.count]).mp3")
                #expect(answer.status == 202, "\(answer.body)")
            }
            #expect(await eventually(timeout: .seconds(20)) { self.bots.allSatisfy { $0.audio().count >= 100 } }, "not every guild was heard")
            // Stored before the outage: each guild's queue gains a track, answered before it.
            for (index, guild) in guilds.enumerated() {
                let pair = cluster.pairs[(index + 1) % 3]
                let queued = try await pair.post(pair.routerURL + "/api/sessions/\(guild)/queue", #"{"url":"tone-990.mp3"}"#)
                #expect(queued.status == 200, "\(queued.body)")
            }
            let owners = try cluster.owners()
            print("database outage: placed \(Dictionary(grouping: guilds, by: { owners[$0] ?? "-" }).mapValues(\.count))")
            try await observe(for: .seconds(1))
        }

        func close() {
            for bot in bots { bot.close() }
            Task { [cluster] in await cluster.stop() }
        }

        struct Watched {
            /// Each time two engines played one guild: the guild, the pairs, when.
            var twice: [String] = []
            /// Each guild's longest silence after the outage began, in seconds, sorted.
            var silences: [Double] = []
        }

        /// Samples the engines' plays every 200 ms from `start` for up to 20 s, until `over` says
        /// the outage is over (given the time since `start`) and every guild is heard again.
        func watch(from start: ContinuousClock.Instant, over: (Duration) -> Bool) async throws -> Watched {
            var watched = Watched()
            var ended = false
            while ContinuousClock.now - start < .seconds(20) {
                let plays = await cluster.enginePlays()
                for guild in guilds where plays.values.filter({ $0.contains(guild) }).count > 1 {
                    watched.twice.append("\(guild) on \(plays.filter { $0.value.contains(guild) }.keys.sorted()) at \(ContinuousClock.now - start)")
                }
                if !ended { ended = over(ContinuousClock.now - start) }
                let heardAgain = bots.allSatisfy { $0.audio().filter { $0.at > start.advanced(by: .seconds(3)) }.count >= 50 }
                if ended && heardAgain { break }
                try await observe(for: .milliseconds(200))
            }
            let until = ContinuousClock.now
            for bot in bots {
                let times = [start] + bot.audio().filter { $0.at > start }.map(\.at) + [until]
                let longest = zip(times, times.dropFirst()).map { $0.1 - $0.0 }.max() ?? .seconds(99)
                watched.silences.append(Double(longest.components.seconds) + Double(longest.components.attoseconds) / 1e18)
            }
            watched.silences.sort()
            return watched
        }

        /// Never two pairs for a guild; each heard again with its own tone within `limit`
        /// seconds; one pair owns each; its queue and its status are as stored before.
        func check(_ watched: Watched, from start: ContinuousClock.Instant, limit: Double) async throws {
            #expect(watched.twice.isEmpty, "played by two pairs at once: \(watched.twice)")
            for (index, bot) in bots.enumerated() {
                let after = bot.audio().filter { $0.at > start.advanced(by: .seconds(3)) }.map(\.packet)
                #expect(after.count >= 50, "\(bot.session) was not heard again")
                if after.count < 50 { print("database outage: \(bot.session): \(bot.connectionCount) connections, closed with \(bot.codes)") }
                if after.count >= 50 {
                    #expect(abs(try tone(of: after) - Double(Self.tones[index % Self.tones.count])) < 15, "\(bot.session) came back with another tone")
                }
            }
            #expect(watched.silences.last ?? 99 <= limit, "a guild was silent longer than \(limit) s: \(watched.silences)")
            if !watched.twice.isEmpty || watched.silences.last ?? 99 > limit {
                print("database outage: logs in \(cluster.keepLogs("db-outage"))")
            }
            let after = try cluster.owners()
            #expect(guilds.allSatisfy { after[$0]?.hasPrefix("pair-") == true }, "owners after: \(after)")
            for (index, guild) in guilds.enumerated() {
                let pair = cluster.pairs[index % 3]
                let state = try await pair.getJSON(pair.routerURL + "/api/sessions/\(guild)", token: TonearmCluster.botToken)
                let queue = (state?["queue"] as? [[String: Any]])?.compactMap { $0["url"] as? String }
                #expect(queue == ["tone-\(Self.tones[index % Self.tones.count]).mp3", "tone-990.mp3"], "\(guild): \(state ?? [:])")
                #expect(state?["status"] as? String == "playing", "\(guild): \(state ?? [:])")
            }
        }
    }
}
