// A pair whose engine is at its CPU budget, asked to play a guild it owns while another pair has
// room: the play starts on that pair and the guild's bot hears it, where it used to be refused
// with `engine_full`. Alone, the full pair still refuses.
import Foundation
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ClusterRoomEndToEndTests {
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aFullPairsPlayStartsOnAPairWithRoom() async throws {
        // Pair 0's budget (0.1 % of its cores) is below its engine's own idle cost: every play is refused.
        let cluster = try PairCluster(count: 2, pairEnvironment: [0: ["TONEARM_CPU_BUDGET": "0.1"]])
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start(only: [0])
        let full = "\(cluster.pairs[0].host):\(cluster.pairs[0].routerPort)"
        // The guild's bot reaches the full pair, and only it.
        let bot = BalancedListener(session: "roomy", addresses: { [full] }, start: 0)
        defer { bot.close() }
        #expect(await eventually(timeout: .seconds(10)) { bot.connectionCount > 0 && (try? cluster.owners()["roomy"]) == "pair-0" })
        let alone = try await cluster.pairs[0].play("roomy", "tone-440.mp3")
        #expect(alone.status == 503 && alone.body.contains("\"engine_full\""), "with no pair that has room: \(alone)")

        try await cluster.start(only: [1])
        #expect(await eventually(timeout: .seconds(10)) { await cluster.pairs[1].clusterReady() }, "pair 1 never renewed")
        #expect(await eventually(timeout: .seconds(10)) { (try? cluster.steady(1)) == true }, "pair 1 never became steady")
        #expect(try cluster.owners()["roomy"] == "pair-0", "the guild left the full pair before its play")

        let asked = ContinuousClock.now
        let moved = try await cluster.pairs[0].play("roomy", "tone-440.mp3")
        #expect(moved.status == 202, "the play was refused although pair 1 had room: \(moved.body)")
        #expect(
            await eventually(timeout: .seconds(10)) { bot.audio().filter { $0.at > asked }.count >= 100 },
            "the guild was not heard after its play went to pair 1 (bot codes \(bot.codes))")
        let first = try #require(bot.audio().first { $0.at > asked })
        let waited = first.at - asked
        print("room elsewhere: the first frame \(waited) after the play was asked; bot codes \(bot.codes)")
        // The pair with room took it on at its next round (a lease/8) or when the bot came.
        #expect(waited < .seconds(3), "the play started \(waited) after it was asked")
        #expect(abs(try tone(of: bot.audio().filter { $0.at > asked }.map(\.packet)) - 440) < 15)
        #expect(bot.codes.first == 4012, "the bot was moved with \(bot.codes)")
        #expect(try cluster.owners()["roomy"] == "pair-1")
        let plays = await cluster.enginePlays()
        #expect(plays[1]?.contains("roomy") == true && plays[0]?.contains("roomy") != true, "played by \(plays)")
        // From the track's start, its queue with it (the refused play's track, then this one).
        let state = try #require(
            try await cluster.pairs[1].getJSON(cluster.pairs[1].routerURL + "/api/sessions/roomy", token: TonearmCluster.botToken))
        let position = (state["position_ms"] as? NSNumber)?.doubleValue ?? -1
        let heardMS = Double(bot.audio().filter { $0.at > asked }.count) * 20
        let queue = (state["queue"] as? [[String: Any]])?.compactMap { $0["url"] as? String }
        #expect(state["status"] as? String == "playing" && queue == ["tone-440.mp3", "tone-440.mp3"] && state["current"] as? Int == 1, "\(state)")
        #expect(position >= 0 && abs(position - heardMS) < 1_500, "at \(position) ms after \(heardMS) ms heard: \(state)")
        await cluster.stop()
    }
}
