// Media a stranger can hand the engine (a URL or a file anyone may play) that once stopped every
// session: each is played beside a bystander session whose tone must go on without a gap, with
// the engine process and its socket connection unchanged. The files come from
// `Tests/Fixtures/hostile_media.py`.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport
import WireProtocol

@Suite(.serialized) struct HostileSourceEndToEndTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/hostile_media.py").path

    /// Plays `kind` in one session beside a 440 Hz bystander; answers the hostile session's events.
    func playBesideABystander(_ kind: String) async throws -> [WireEvent] {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 12, into: harness.media, name: "bystander.mp3")
        let file = kind + (kind == "many-channels" ? ".wav" : ".opus")
        try runTool("python3", [Self.script, kind, harness.media + "/" + file])
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let pid = try #require(harness.engine?.pid)
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("bystander").count >= 25 })
        let status = try await harness.post("/session/stranger/play", #"{"url":"\#(file)"}"#).status
        #expect(status == 202 || status == 422, "play answered \(status)")
        // The hostile file is 4 s long: wait for its end, then two seconds more of the bystander.
        #expect(await eventually(timeout: .seconds(15)) { socket.firstEvent("stranger", .finished) != nil || status == 422 })
        let mark = socket.packets("bystander").count
        #expect(await eventually(timeout: .seconds(5)) { socket.packets("bystander").count >= mark + 100 })

        #expect(harness.engine?.isRunning == true && harness.engine?.pid == pid, "the engine process died")
        #expect(socket.failure == nil, "the socket carried something a reader refuses: \(socket.failure ?? "")")
        #expect(socket.isActive, "the engine's socket connection was dropped")
        let bystander = socket.packets("bystander")
        let gaps = zip(bystander.dropFirst(), bystander).map { milliseconds($0.at - $1.at) }
        #expect(gaps.max() ?? 0 < 100, "the bystander had a gap of \(gaps.max() ?? 0) ms")
        let heard = Spectrum.dominantFrequency(try decodeLeft(bystander.suffix(50).map(\.data)))
        #expect(abs(heard - 440) < 5, "the bystander heard \(heard) Hz")
        socket.close()
        return socket.events("stranger").map(\.event)
    }

    @Test func aPacketLargerThanAWireFrameIsSkippedAndCounted() async throws {
        let events = try await playBesideABystander("oversized-packet")
        #expect(events.last?.type == .finished && events.last?.reason == .finished, "\(events)")
    }

    @Test func aHundredKilobyteTitleArrivesCut() async throws {
        let events = try await playBesideABystander("huge-title")
        let ready = try #require(events.first { $0.type == .ready })
        let title = try #require(ready.title)
        #expect(title.utf8.count <= WireEvent.Limit.title && title.hasSuffix("…") && title.hasPrefix("é\u{01}é"))
    }

    @Test func aSecondOfPacketsThatAreNotOpusEndsThePlayWithAnError() async throws {
        let events = try await playBesideABystander("garbage-packets")
        let error = try #require(events.first { $0.type == .error }, "\(events)")
        #expect(error.code == "decode_failed" && error.message?.contains("not valid Opus") == true, "\(error)")
        #expect(events.last?.reason == .error)
    }

    /// Granule positions near 2^62: timestamps whose arithmetic once could trap.
    @Test func timestampsNearTheEndOfTimeDoNotStopTheEngine() async throws {
        let events = try await playBesideABystander("huge-timestamps")
        #expect(events.last?.type == .finished, "\(events)")
    }

    @Test func sixteenChannelsAreRefusedWithASentence() async throws {
        let events = try await playBesideABystander("many-channels")
        let error = try #require(events.first { $0.type == .error }, "\(events)")
        #expect(error.code == "unsupported_source" && error.message?.contains("16 channels") == true, "\(error)")
    }

    /// Anyone may ask for pages to be resolved; each costs a yt-dlp process. With one allowed at
    /// a time and one waiting, a third is told to come back (503, Retry-After) at once, the
    /// waiting one runs when the first is done, and a bystander's play is not held up.
    @Test func resolvesBeyondTheLimitWaitThenAreRefusedWithRetryAfter() async throws {
        let scratch = try TemporaryDirectory(prefix: "tonearm-slow-ytdlp")
        let script = scratch.file("yt-dlp")
        try #"""
            #!/bin/sh
            sleep 3
            echo '{"_type":"video","url":"http://127.0.0.1:9/x.mp3","title":"slow","duration":1e308}'
            """#.write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        let harness = try EngineHarness(environment: [
            "TONEARM_YTDLP": script, "TONEARM_RESOLVE_CONCURRENCY": "1", "TONEARM_RESOLVE_QUEUE": "1",
        ])
        try MediaFixture.tone(440, seconds: 10, into: harness.media, name: "bystander.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let started = ContinuousClock.now
        async let first = harness.get("/resolve?url=http://127.0.0.1:9/one.html")
        try await observe(for: .milliseconds(300))
        async let second = harness.get("/resolve?url=http://127.0.0.1:9/two.html")
        try await observe(for: .milliseconds(300))
        var request = HTTPClientRequest(url: harness.url + "/resolve?url=http://127.0.0.1:9/three.html")
        request.method = .GET
        let third = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let thirdBody = String(buffer: try await third.body.collect(upTo: 1 << 16))
        #expect(third.status == .serviceUnavailable && thirdBody.contains("resolver_busy"), "\(third.status) \(thirdBody)")
        #expect(third.headers.first(name: "Retry-After") == "5")
        #expect(ContinuousClock.now - started < .seconds(2), "the refusal came at once")
        // A local file plays meanwhile, heard without waiting for the resolves.
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(2)) { socket.packets("bystander").count >= 25 })
        let (one, two) = try await (first, second)
        #expect(one.status == 200 && two.status == 200, "\(one) \(two)")
        #expect(ContinuousClock.now - started >= .seconds(6), "the second waited for the first")
        // A page's absurd duration (1e308 s) is no duration, not a trap.
        #expect(one.json["duration_ms"] == nil && one.json["title"] as? String == "slow")
        #expect(harness.engine?.isRunning == true)
        socket.close()
    }
}
