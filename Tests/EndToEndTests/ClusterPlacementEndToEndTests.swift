// Where a cluster's guilds go and how soon they are heard there, against real processes on a
// real PostgreSQL: a guild played through one pair is heard at once through another, and a pair
// on a dear host (a small CPU budget) gives a cheap one more of its guilds than the counts would.
import Foundation
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ClusterPlacementEndToEndTests {
    /// What the deployment's smoke test does first with a cluster: a guild is played through one
    /// pair the moment the pairs say they are members, and its bot connects at once through
    /// another (a balancer's next address). It must be heard from its first second. In the smoke
    /// test (Caddy in front of three pairs in containers) the first listen after the play heard 0
    /// and 80 frames of 200 in two runs of thirteen, cause not found; here that moment is played
    /// once per pair (TONEARM_FIRST_LISTEN_ROUNDS more times), with normalisation on as the
    /// deployment has it, and each bot's first frame is timed.
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aGuildPlayedThroughOnePairIsHeardAtOnceThroughAnother() async throws {
        let cluster = try PairCluster(environment: ["TONEARM_NORMALIZE": "true"])
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start()
        // As the smoke test waits: each pair's /health says it renews its leases (not yet steady).
        for pair in cluster.pairs {
            #expect(await eventually(timeout: .seconds(15)) { await pair.clusterReady() }, "a pair never joined")
        }
        let tones = [440, 550, 660, 770, 880, 990]
        let rounds = Int(ProcessInfo.processInfo.environment["TONEARM_FIRST_LISTEN_ROUNDS"] ?? "") ?? 3
        var firstFrames: [Double] = []
        var failed: [String] = []
        for round in 0..<rounds {
            let guild = "first-listen-\(round)"
            let hertz = tones[round % tones.count]
            let player = round % cluster.pairs.count
            let listener = (round + 1) % cluster.pairs.count
            let answer = try await cluster.pairs[player].play(guild, "tone-\(hertz).mp3")
            #expect(answer.status == 202, "\(answer.body)")
            let address = cluster.allAddresses[listener]
            let connected = ContinuousClock.now
            let bot = BalancedListener(session: guild, addresses: { [address] }, start: 0)
            try await observe(for: .seconds(4))
            bot.close()
            let audio = bot.audio()
            let first = audio.first.map { ClusterEndToEndTests.seconds($0.at - connected) } ?? 99
            firstFrames.append(first)
            let heard = audio.count >= 150 ? (try? tone(of: audio.map(\.packet))) ?? 0 : 0
            if audio.count < 150 || abs(heard - Double(hertz)) >= 15 || !bot.codes.isEmpty {
                let texts = bot.events().suffix(3).map { "\($0.json)" }
                failed.append(
                    "\(guild) (played through pair \(player), heard through pair \(listener), owned by "
                        + "\((try? cluster.owners()[guild]) ?? "?")): \(audio.count) frames, \(Int(heard)) Hz, first after "
                        + "\(String(format: "%.2f", first)) s, close codes \(bot.codes), last messages \(texts)")
            }
        }
        print("cluster first listen: first frame after \(firstFrames.map { String(format: "%.2f", $0) }) s")
        #expect(failed.isEmpty, "\(failed.joined(separator: "\n")); logs in \(failed.isEmpty ? "" : cluster.keepLogs("first-listen"))")
        await cluster.stop()
    }

    /// Rebalancing by cost (docs/cluster.md): pair 0's engine may use 8 % of the host's CPU (a
    /// slow or crowded host), pair 1's the default 75 %. Pair 0 plays four guilds alone; then
    /// pair 1 joins. By the counts it would be given two (4 against 0, half the difference, as
    /// ClusterEndToEndTests' joining pair is); by what the guilds cost on each, pair 0 keeps at
    /// most one. Every guild plays on, on one pair.
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aPairOnADearHostGivesACheapOneMoreThanTheCountsWould() async throws {
        let cluster = try PairCluster(count: 2, pairEnvironment: [0: ["TONEARM_CPU_BUDGET": "8"]])
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start(only: [0])
        let tones = [440, 550, 660, 770]
        let guilds = tones.indices.map { "dear-\($0)" }
        for (index, guild) in guilds.enumerated() {
            #expect(try await cluster.pairs[0].play(guild, "tone-\(tones[index]).mp3").status == 202)
        }
        let bots = guilds.enumerated().map { index, guild in
            BalancedListener(session: guild, addresses: { [cluster] in cluster.liveAddresses }, start: index)
        }
        defer { for bot in bots { bot.close() } }
        #expect(await eventually(timeout: .seconds(15)) { bots.allSatisfy { $0.audio().count >= 100 } }, "not every guild was heard")
        let rowsBefore = (try? cluster.postgres.sql("SELECT id, load, sessions FROM tonearm_pair")) ?? "?"
        try await cluster.start(only: [1])
        let owned = { (pair: String) in (try? cluster.owners().filter { guilds.contains($0.key) && $0.value == pair }.count) ?? -1 }
        let moved = await eventually(timeout: .seconds(50)) { owned("pair-1") >= 3 }
        let rows = (try? cluster.postgres.sql("SELECT id, load, sessions FROM tonearm_pair")) ?? "?"
        #expect(moved, "pair 1 was given \(owned("pair-1")) of 4; pairs before it joined: \(rowsBefore); now: \(rows)")
        print("cluster rebalancing by cost: pair 0 (8 % budget) kept \(owned("pair-0")) of 4; pairs \(rows.split(separator: "\n"))")
        // Every guild is heard after the moves, its own tone, played by one pair.
        let settled = ContinuousClock.now
        #expect(
            await eventually(timeout: .seconds(10)) { bots.allSatisfy { $0.audio().filter { $0.at > settled }.count >= 100 } },
            "a guild was not heard after the moves")
        for (index, bot) in bots.enumerated() {
            #expect(abs(try tone(of: bot.audio().map(\.packet)) - Double(tones[index])) < 15, "\(bot.session) heard the wrong tone")
        }
        let plays = await cluster.enginePlays()
        #expect(guilds.allSatisfy { guild in plays.values.filter { $0.contains(guild) }.count == 1 }, "\(plays)")
        await cluster.stop()
    }
}
