// Sources that answer slowly or not at all, and the deadlines and owners that keep them from
// holding what other users need. Every case runs beside a bystander bot session playing 440 Hz,
// whose tone must go on, with the engine's pid and the Router's engine link unchanged. The engine
// allows exactly 127.0.0.2 as a source host, a stand-in for a public server.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport
import WireProtocol

@Suite(.serialized) struct SlowSourceEndToEndTests {
    static let resolveTimeout = 4
    static let environment = [
        "TONEARM_ALLOW_PRIVATE_SOURCES": "0", "TONEARM_ALLOWED_SOURCE_NETWORKS": "127.0.0.2/32",
        "TONEARM_RESOLVE_TIMEOUT": "\(resolveTimeout)",
    ]

    /// A pair with a bystander bot session hearing 440 Hz; answers the pair, the bystander and
    /// the engine's pid.
    static func pairWithABystander(
        tones: [Int] = [440, 660], environment: [String: String] = [:]
    ) async throws -> (TonearmCluster, SessionListener, Int32) {
        let cluster = try TonearmCluster(tones: tones, seconds: 60, environment: Self.environment.merging(environment) { $1 })
        try await cluster.startBoth()
        let pid = try #require(cluster.engine?.pid)
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("bystander", "tone-440.mp3").status == 202)
        #expect(await bystander.hears(440))
        return (cluster, bystander, pid)
    }

    /// The bystander heard its tone throughout, from the same engine over the same link.
    static func expectBystanderUntouched(_ cluster: TonearmCluster, _ bystander: SessionListener, pid: Int32) async throws {
        let audio = bystander.audio()
        let gaps = zip(audio.dropFirst(), audio).map { milliseconds($0.at - $1.at) }
        #expect(gaps.dropFirst(25).max() ?? 0 < 200, "the bystander had a gap of \(gaps.dropFirst(25).max() ?? 0) ms")
        #expect(try abs(bystander.lastTone() - 440) < 5)
        #expect(cluster.engine?.pid == pid && cluster.engine?.isRunning == true, "the engine process changed")
        #expect(try await cluster.engineConnects() == 1, "the Router's engine link was made again")
    }

    /// A command's answer and how long it took.
    struct Answer: Sendable {
        /// 0: no answer within the time allowed.
        let status: Int
        let body: String
        let took: Duration
        var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]) ?? [:] }
    }

    /// POSTs to a Router path with the bot token, allowing `timeout` for the answer.
    static func timed(
        _ cluster: TonearmCluster, _ path: String, _ json: String? = nil, timeout: Duration = .seconds(5)
    ) async -> Answer {
        let started = ContinuousClock.now
        var request = HTTPClientRequest(url: cluster.routerURL + path)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(TonearmCluster.botToken)")
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json))
        }
        let seconds = timeout.components.seconds
        guard let response = try? await cluster.client.execute(request, timeout: .seconds(seconds)),
            let body = try? await response.body.collect(upTo: 1 << 20)
        else { return Answer(status: 0, body: "", took: ContinuousClock.now - started) }
        return Answer(status: Int(response.status.code), body: String(buffer: body), took: ContinuousClock.now - started)
    }

    /// The URLs a state says are still being resolved.
    static func resolving(_ state: [String: Any]) -> [String] {
        ((state["resolving"] as? [[String: Any]]) ?? []).compactMap { $0["url"] as? String }
    }

    /// Four plays of a server that sends 20 KB and then a byte every 50 ms (before: each play's
    /// request hung, the four held every slot the engine had for resolving, every other user's
    /// play waited 20 s for `resolver_busy`, and stop released nothing). Now each is answered at
    /// once with its track resolving; other users' plays, of a media file and of a quick server,
    /// are answered and heard; a stop ends its source's connection at once; the one left alone
    /// ends at the deadline with `source_timeout`.
    @Test func fourDribblingSourcesHoldNothingOthersNeed() async throws {
        let served = try TemporaryDirectory(prefix: "tonearm-dribble")
        try MediaFixture.tone(550, seconds: 30, into: served.path)
        let dribbling = try MediaServer(
            root: served.path, address: "127.0.0.2", arguments: ["--dribble-after", "20000", "--dribble-interval", "0.05"])
        defer { dribbling.stop() }
        let quick = try MediaServer(root: served.path, address: "127.0.0.2")
        defer { quick.stop() }
        let (cluster, bystander, pid) = try await Self.pairWithABystander()
        defer { Task { [cluster] in await cluster.stop() } }
        defer { bystander.close() }
        let listeners = (0..<4).map { SessionListener(session: "dribble\($0)", routerPort: cluster.routerPort, bot: true) }
        defer { for listener in listeners { listener.close() } }
        #expect(await eventually { listeners.allSatisfy(\.isConnected) })

        let url = dribbling.url("tone-550.mp3")
        let plays = await withTaskGroup(of: (Int, Answer).self) { group in
            for n in 0..<4 {
                group.addTask { (n, await Self.timed(cluster, "/api/sessions/dribble\(n)/play", #"{"url":"\#(url)"}"#)) }
            }
            return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        for (n, play) in plays.sorted(by: { $0.key < $1.key }) {
            #expect(play.status == 202 && play.took < .milliseconds(1_500), "dribble\(n): \(play.status) after \(play.took)")
            #expect(Self.resolving(play.json) == [url], "dribble\(n): \(play.json)")
        }
        #expect(try await eventually { try await dribbling.openResponses() >= 4 }, "the four are not being fetched")

        // Other users: a file of the media folder and a quick server, answered at once and heard.
        let other = SessionListener(session: "other", routerPort: cluster.routerPort, bot: true)
        let network = SessionListener(session: "network", routerPort: cluster.routerPort, bot: true)
        defer { other.close(); network.close() }
        #expect(await eventually { other.isConnected && network.isConnected })
        let file = await Self.timed(cluster, "/api/sessions/other/play", #"{"url":"tone-660.mp3"}"#)
        #expect(file.status == 202 && file.took < .seconds(2), "a file: \(file.status) after \(file.took) \(file.json)")
        #expect(await other.hears(660))
        let fetched = await Self.timed(cluster, "/api/sessions/network/play", #"{"url":"\#(quick.url("tone-550.mp3"))"}"#)
        #expect(fetched.status == 202 && fetched.took < .seconds(2), "a quick source: \(fetched.status) after \(fetched.took)")
        #expect(await network.hears(550))

        // Stop frees what a play holds at once: three of the four connections end.
        let stopping = ContinuousClock.now
        for n in 0..<3 {
            let stop = await Self.timed(cluster, "/api/sessions/dribble\(n)/stop")
            #expect(stop.status == 200 && stop.took < .seconds(1), "stop dribble\(n): \(stop.status) after \(stop.took)")
            #expect(Self.resolving(stop.json).isEmpty, "\(stop.json)")
        }
        let freed = try await eventually(timeout: .seconds(1)) { try await dribbling.openResponses() <= 1 }
        let freedAfter = ContinuousClock.now - stopping
        let open = try await dribbling.openResponses()
        #expect(freed, "\(open) responses still open after the stops")

        // The fourth meets the deadline: an error its clients are told, and nothing queued.
        let left = listeners[3]
        #expect(
            await eventually(timeout: .seconds(Self.resolveTimeout + 3)) {
                left.events().contains { $0["type"] as? String == "error" && $0["code"] as? String == "source_timeout" }
            }, "\(left.texts())")
        let state = try await cluster.state("dribble3")
        #expect(
            Self.resolving(state).isEmpty && (state["queue"] as? [Any])?.isEmpty == true,
            "\(state)\n\(cluster.engine?.log.suffix(3_000) ?? "")")
        #expect(try await eventually(timeout: .seconds(2)) { try await dribbling.openResponses() == 0 })
        print(
            "dribbling: plays answered after \(plays.values.map { Int(milliseconds($0.took)) }.sorted()) ms; a file played by "
                + "another user answered after \(Int(milliseconds(file.took))) ms, a quick source after "
                + "\(Int(milliseconds(fetched.took))) ms; three stops and their connections closed within \(Int(milliseconds(freedAfter))) ms")
        for listener in listeners.prefix(3) {
            let errors = listener.events().filter { $0["type"] as? String == "error" }
            #expect(errors.isEmpty, "\(listener.session): \(errors)")
        }
        try await Self.expectBystanderUntouched(cluster, bystander, pid: pid)
    }

    /// The engine's own side of a play: a source that dribbles ends at the deadline with
    /// `source_timeout` (its connection closed), and a page whose yt-dlp never answers is killed
    /// the moment its play is stopped, not at the deadline. A bystander plays throughout.
    @Test func aPlaysOpeningEndsAtTheDeadlineOrWithThePlay() async throws {
        let served = try TemporaryDirectory(prefix: "tonearm-dribble")
        try MediaFixture.tone(550, seconds: 30, into: served.path)
        let dribbling = try MediaServer(
            root: served.path, address: "127.0.0.2", arguments: ["--dribble-after", "20000", "--dribble-interval", "0.05"])
        defer { dribbling.stop() }
        let marker = "tonearm-hanging-ytdlp-\(UInt32.random(in: 0 ... .max))"
        let script = served.file("yt-dlp")
        try "#!/bin/sh\nexec python3 -c 'import time; time.sleep(300)  # \(marker)'\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let harness = try EngineHarness(environment: Self.environment.merging(["TONEARM_YTDLP": script]) { $1 })
        try MediaFixture.tone(440, seconds: 30, into: harness.media, name: "bystander.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let pid = try #require(harness.engine?.pid)
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("bystander").count >= 25 })

        let started = ContinuousClock.now
        #expect(try await harness.post("/session/dribble/play", #"{"url":"\#(dribbling.url("tone-550.mp3"))"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(Self.resolveTimeout + 3)) { socket.firstEvent("dribble", .finished) != nil })
        let took = ContinuousClock.now - started
        let error = try #require(socket.firstEvent("dribble", .error)?.event)
        #expect(error.code == "source_timeout", "\(error)")
        #expect(took >= .seconds(Self.resolveTimeout) && took < .seconds(Self.resolveTimeout + 2), "ended after \(took)")
        print("a dribbling play ended with source_timeout after \(took) (TONEARM_RESOLVE_TIMEOUT=\(Self.resolveTimeout))")
        #expect(try await eventually(timeout: .seconds(2)) { try await dribbling.openResponses() == 0 })

        #expect(try await harness.post("/session/page/play", #"{"url":"http://127.0.0.2:9/a-page"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(5)) { processIsRunning(commandLineContaining: marker) }, "yt-dlp did not start")
        let stopped = ContinuousClock.now
        #expect(try await harness.post("/session/page/stop").status == 200)
        #expect(await eventually(timeout: .seconds(2)) { !processIsRunning(commandLineContaining: marker) }, "yt-dlp outlived its play")
        let killed = ContinuousClock.now - stopped
        #expect(killed < .seconds(2))
        print("a play's hanging yt-dlp was gone \(Int(milliseconds(killed))) ms after its stop")

        let packets = socket.packets("bystander")
        let gaps = zip(packets.dropFirst(), packets).map { milliseconds($0.at - $1.at) }
        #expect(gaps.max() ?? 0 < 100, "the bystander had a gap of \(gaps.max() ?? 0) ms")
        #expect(abs(try tone(of: packets.suffix(50).map(\.data)) - 440) < 5)
        #expect(harness.engine?.pid == pid && harness.engine?.isRunning == true && socket.isActive)
        socket.close()
    }
}
