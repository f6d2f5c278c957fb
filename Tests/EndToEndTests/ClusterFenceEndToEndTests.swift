// A pair's engine stops its plays for a fence its Router did not mean (as one that ran out before
// the Router's next one came, its rounds late under load): the pair still holds the guild, so it
// plays it on from where it was. In the chaos run of 2026-11-29 such guilds stayed silent for 23 s,
// until their pair was killed and another took them.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ClusterFenceEndToEndTests {
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aPlayStoppedForALapsedFenceIsPlayedOnByThePairThatHoldsIt() async throws {
        let cluster = try PairCluster(count: 1)
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start()
        let pair = cluster.pairs[0]
        #expect(await eventually(timeout: .seconds(10)) { await pair.clusterReady() }, "the pair never renewed")
        let bot = BalancedListener(session: "fenced", addresses: { ["\(pair.host):\(pair.routerPort)"] }, start: 0)
        defer { bot.close() }
        #expect(await eventually(timeout: .seconds(10)) { bot.connectionCount > 0 })
        #expect(try await pair.play("fenced", "tone-440.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(10)) { bot.audio().count >= 150 }, "the guild was not heard")
        let before = try await position(of: "fenced", on: pair)

        // Another holder's fence, run out at once: the engine stops every play (code `fenced`).
        var request = HTTPClientRequest(url: pair.engineURL + "/fence")
        request.method = .PUT
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(ByteBuffer(string: #"{"holder":"lapsed","version":1,"valid_ms":0,"sessions":[]}"#))
        let answer = try await HTTPClient.shared.execute(request, timeout: .seconds(5))
        let body = String(buffer: try await answer.body.collect(upTo: 1 << 16))
        #expect(answer.status.code == 200 && body.contains(#""stopped":1"#), "\(body)")
        let stoppedAt = ContinuousClock.now

        #expect(
            await eventually(timeout: .seconds(5)) { bot.audio().filter { $0.at > stoppedAt }.count >= 100 },
            "the guild stayed silent although its pair holds it (bot codes \(bot.codes))")
        let times = [stoppedAt] + bot.audio().filter { $0.at > stoppedAt }.map(\.at)
        let silence = zip(times, times.dropFirst()).map { $0.1 - $0.0 }.max() ?? .seconds(99)
        print("lapsed fence: the guild silent for \(silence); position \(before) ms before")
        // The pair's next round (a lease/8) puts its own fence back and plays the guild on.
        #expect(silence < .seconds(2), "silent for \(silence)")
        #expect(abs(try tone(of: bot.audio().filter { $0.at > stoppedAt }.map(\.packet)) - 440) < 15)
        // From where it was, not from the track's start.
        #expect(try await position(of: "fenced", on: pair) >= before, "it started over")
        #expect(try cluster.owners()["fenced"] == "pair-0")
        await cluster.stop()
    }

    private func position(of guild: String, on pair: TonearmCluster) async throws -> Double {
        let state = try await pair.getJSON(pair.routerURL + "/api/sessions/\(guild)", token: TonearmCluster.botToken)
        return (state?["position_ms"] as? NSNumber)?.doubleValue ?? -1
    }
}
