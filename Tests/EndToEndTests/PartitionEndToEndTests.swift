// Cuts and mends: three pairs, each in a host of its own, on a real PostgreSQL, nine guilds
// playing their tones, each heard by a bot through a balancer that sends to every Router in turn
// (with a connect and a silence timeout, as the reference bot has). Again and again one pair's
// host is cut off from everything for 8 s, then mended. Every engine's session list is read every
// 100 ms all the while: a guild in two of them breaks the cluster's first promise. After each
// mend, no guild may be silent longer than a failover takes.
import Foundation
import Synchronization
import TestSupport
import Testing

/// Every engine's plays, read every 100 ms: each sample that finds a guild in two engines.
final class TwoEngineWatch: Sendable {
    private let found = Mutex<[String]>([])
    private let count = Atomic<Int>(0)
    /// Every sample: seconds since the start, and each engine's plays (for a failure's reader).
    private let history = Mutex<[String]>([])
    private let task = Mutex<Task<Void, Never>?>(nil)

    init(_ cluster: PairCluster, guilds: [String], from start: ContinuousClock.Instant) {
        let handle = Task { [self] in
            while !Task.isCancelled {
                let plays = await cluster.enginePlays()
                count.add(1, ordering: .relaxed)
                let line = String(format: "%.2f", ClusterEndToEndTests.seconds(ContinuousClock.now - start)) + " "
                    + plays.keys.sorted().map { "pair-\($0): \(plays[$0]?.sorted().joined(separator: ",") ?? "")" }.joined(separator: " | ")
                history.withLock { $0.append(line) }
                for guild in guilds {
                    let holders = plays.filter { $0.value.contains(guild) }.map(\.key).sorted()
                    if holders.count > 1 {
                        found.withLock { $0.append("\(guild) on pairs \(holders) at \(ContinuousClock.now - start)") }
                    }
                }
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
        task.withLock { $0 = handle }
    }

    var twice: [String] { found.withLock { $0 } }
    var samplesText: String { history.withLock { $0.joined(separator: "\n") } }
    var samples: Int { count.load(ordering: .relaxed) }
    func stop() { task.withLock { $0?.cancel() } }
}

@Suite(.serialized, .timeLimit(.minutes(8))) struct PartitionEndToEndTests {
    /// The longest time between two frames a bot heard in `from..<to` (counting from `from` to
    /// the first frame after it), in seconds.
    static func longestSilence(_ bot: BalancedListener, from: ContinuousClock.Instant, to: ContinuousClock.Instant) -> Double {
        let times = [from] + bot.audio().map(\.at).filter { $0 > from && $0 < to } + [to]
        let gap = zip(times, times.dropFirst()).map { $0.1 - $0.0 }.max() ?? .zero
        return ClusterEndToEndTests.seconds(gap)
    }

    @Test(.enabled(if: ClusterEndToEndTests.canMakeNamespaces)) func cutsAndMendsNeverPlayAGuildOnTwoPairs() async throws {
        let cuts = Int(ProcessInfo.processInfo.environment["TONEARM_PARTITION_CUTS"] ?? "") ?? 10
        let network = try BridgedNetwork(hosts: 3)
        // Every guild plays one track through all the cuts.
        let cluster = try PairCluster(toneSeconds: Double(30 + cuts * 15), network: network)
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start()
        let tones = [440, 550, 660, 770, 880, 990]
        let guilds = (0..<9).map { "part-\($0)" }
        let bots = try await cluster.playWithBots(guilds, tones: tones)
        defer { for bot in bots { bot.close() } }
        #expect(await eventually(timeout: .seconds(20)) { bots.allSatisfy { $0.audio().count >= 100 } }, "not every guild was heard")

        let start = ContinuousClock.now
        let watch = TwoEngineWatch(cluster, guilds: guilds, from: start)
        defer { watch.stop() }
        var cutSilences: [Double] = []
        var healSilences: [Double] = []
        var notes: [String] = []
        for round in 0..<cuts {
            let victim = round % cluster.pairs.count
            let owned = Set(try cluster.owners().filter { $0.value == "pair-\(victim)" }.map(\.key))
            let cutAt = ContinuousClock.now
            try cluster.cut(victim)
            try await observe(for: .seconds(8))
            try cluster.mend(victim)
            let mendedAt = ContinuousClock.now
            // An observation window after the mend: rounds resume, the healed pair is given
            // guilds back only once its rounds have succeeded for a lease.
            try await observe(for: .seconds(6))
            let end = ContinuousClock.now
            var worstCut = 0.0
            var worstHeal = 0.0
            for bot in bots {
                let cut = Self.longestSilence(bot, from: cutAt, to: mendedAt)
                let heal = Self.longestSilence(bot, from: mendedAt, to: end)
                cutSilences.append(cut)
                healSilences.append(heal)
                worstCut = max(worstCut, cut)
                worstHeal = max(worstHeal, heal)
            }
            let worst = bots.max { Self.longestSilence($0, from: cutAt, to: end) < Self.longestSilence($1, from: cutAt, to: end) }
            notes.append(String(
                format: "cut %d (pair-%d, %d guilds) at %.1f s: longest silence %.2f s in the cut, %.2f s after the mend (%@)", round + 1,
                victim, owned.count, ClusterEndToEndTests.seconds(cutAt - start), worstCut, worstHeal, worst?.session ?? "-"))
        }
        watch.stop()
        for note in notes { print("partition: \(note)") }
        if !watch.twice.isEmpty || cutSilences.contains(where: { $0 >= 5.5 }) || healSilences.contains(where: { $0 >= 1 }) {
            for bot in bots {
                print("partition: \(bot.session) close codes \(bot.codes.suffix(12)), abandoned \(bot.abandoned), connections \(bot.connectionCount)")
            }
            let folder = cluster.keepLogs("partition")
            try? watch.samplesText.write(toFile: folder + "/engine-samples.txt", atomically: true, encoding: .utf8)
            print("partition: the pairs' logs and the engines' samples are kept in \(folder)")
        }
        print("partition: \(cuts) cuts of 8 s, \(watch.samples) samples of the three engines, \(watch.twice.count) with a guild on two")
        #expect(watch.twice.isEmpty, "a guild played by two pairs at once: \(watch.twice.prefix(8))")
        // A failover: the lease (3 s), a round to take it, the bot's silence timeout or the
        // relay's check to notice, and the track's opening.
        #expect(cutSilences.allSatisfy { $0 < 5.5 }, "a guild was silent longer than a failover during a cut: \(cutSilences.max() ?? 0) s")
        #expect(healSilences.allSatisfy { $0 < 1 }, "a guild went silent after a mend: \(healSilences.max() ?? 0) s")
        // Every guild still plays its own tone.
        for (index, bot) in bots.enumerated() {
            #expect(abs(try tone(of: bot.audio().map(\.packet)) - Double(tones[index % tones.count])) < 15, "\(bot.session) hears another tone")
        }
        await cluster.stop()
    }
}
