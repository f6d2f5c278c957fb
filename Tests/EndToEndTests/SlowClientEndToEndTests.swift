// Clients of the Router that hold on without doing their part — one that never reads nor answers
// a close, hundreds that send their headers a byte at a time or sit idle on a keep-alive
// connection — beside a bystander bot session that keeps hearing its tone, with the engine's pid
// and the Router's engine link unchanged.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport

@Suite(.serialized) struct SlowClientEndToEndTests {
    /// SIGTERM with a client that never reads and never answers the close handshake (before: the
    /// Router had not exited 20 s later, held by that one connection), and a few sending their
    /// request head a byte a second. It exits within 3 s, closing every WebSocket with 1001, and
    /// what the sessions were is on disk: a Router started again has the volume set just before.
    @Test func shutdownDoesNotWaitForASilentClient() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 60)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let pid = try #require(cluster.engine?.pid)
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("bystander", "tone-440.mp3").status == 202)
        #expect(await bystander.hears(440))
        #expect(try await cluster.call(.POST, "/api/sessions/bystander/volume", #"{"volume":37}"#).status == 200)

        let url = "ws://127.0.0.1:\(cluster.routerPort)/bot?guild=%@&token=\(TonearmCluster.botToken)"
        async let silent = wsProbe(String(format: url, "bystander"), "stall", seconds: 8)
        async let reader = wsProbe(String(format: url, "reader"), "nopong", seconds: 30)
        let slow = try Self.slowHTTP(cluster, slow: 5, idle: 5, seconds: 6)
        try await observe(for: .seconds(1))

        let router = try #require(cluster.router)
        let signalled = ContinuousClock.now
        let exited = await router.terminate(timeout: .seconds(10))
        let took = ContinuousClock.now - signalled
        #expect(exited && took < .seconds(3), "the Router took \(took) to exit after SIGTERM (exited: \(exited))")
        print("SIGTERM with a silent client, a reader and 5 slowloris connections: exited after \(took)")
        let report = try await reader
        #expect(report.close_code == 1001, "the reader's connection ended with \(String(describing: report.close_code))")
        _ = try? await silent
        _ = try? await slow.value

        // The engine played on alone; a new Router finds the session as it was left.
        #expect(cluster.engine?.pid == pid && cluster.engine?.isRunning == true)
        try cluster.startRouter()
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() })
        let state = try await cluster.state("bystander")
        #expect(state["volume"] as? Int == 37 && state["status"] as? String == "playing", "\(state)")
    }

    /// Runs `Tests/Fixtures/slow_http.py` against the Router for `seconds`; its report.
    static func slowHTTP(_ cluster: TonearmCluster, slow: Int, idle: Int, seconds: Int) throws -> Task<SlowHTTPReport, any Error> {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/slow_http.py").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, "127.0.0.1", "\(cluster.routerPort)", "\(slow)", "\(idle)", "\(seconds)"]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        return Task {
            let data = await withCheckedContinuation { continuation in
                Thread.detachNewThread { continuation.resume(returning: output.fileHandleForReading.readDataToEndOfFile()) }
            }
            return try JSONDecoder().decode(SlowHTTPReport.self, from: data)
        }
    }

    /// What `Tests/Fixtures/slow_http.py` saw of the Router's connections.
    struct SlowHTTPReport: Decodable, Sendable {
        var slow: Int
        var slow_closed: Int
        var slow_closed_after: [Double]
        var idle: Int
        var idle_closed: Int
        var idle_closed_after: [Double]
        var idle_answered: Int
    }

    /// 300 connections sending their request head a byte a second (slowloris) and 300 idle
    /// keep-alive connections, while a bystander plays and other clients play and control: every
    /// command is answered within a second and heard, and the Router closes the slow connections
    /// at the header timeout and the idle ones at the idle timeout (before: it kept all 600).
    @Test func slowAndIdleConnectionsAreClosedAndHoldUpNobody() async throws {
        let cluster = try TonearmCluster(
            tones: [440, 660], seconds: 60,
            environment: ["TONEARM_HTTP_HEADER_TIMEOUT": "3", "TONEARM_HTTP_IDLE_TIMEOUT": "4"])
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let pid = try #require(cluster.engine?.pid)
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("bystander", "tone-440.mp3").status == 202)
        #expect(await bystander.hears(440))

        let report = try Self.slowHTTP(cluster, slow: 300, idle: 300, seconds: 9)
        try await observe(for: .seconds(1))

        // Meanwhile: another user plays and is heard, and controls are answered at once.
        let other = SessionListener(session: "other", routerPort: cluster.routerPort, bot: true)
        defer { other.close() }
        #expect(await eventually { other.isConnected })
        let play = await SlowSourceEndToEndTests.timed(cluster, "/api/sessions/other/play", #"{"url":"tone-660.mp3"}"#)
        #expect(play.status == 202 && play.took < .seconds(1), "play: \(play.status) after \(play.took)")
        #expect(await other.hears(660))
        for volume in [80, 100, 90] {
            let answer = await SlowSourceEndToEndTests.timed(cluster, "/api/sessions/bystander/volume", #"{"volume":\#(volume)}"#)
            #expect(answer.status == 200 && answer.took < .seconds(1), "volume: \(answer.status) after \(answer.took)")
        }

        let seen = try await report.value
        print(
            "slowloris: \(seen.slow_closed) of \(seen.slow) closed after \(seen.slow_closed_after.first ?? 0)–\(seen.slow_closed_after.last ?? 0) s; "
                + "idle: \(seen.idle_closed) of \(seen.idle) after \(seen.idle_closed_after.first ?? 0)–\(seen.idle_closed_after.last ?? 0) s; "
                + "another user's play answered after \(Int(milliseconds(play.took))) ms")
        #expect(seen.idle_answered == 300, "\(seen.idle_answered) of the idle connections had their answer")
        #expect(seen.slow_closed == 300 && (seen.slow_closed_after.max() ?? 99) < 5.5, "slowloris: \(seen.slow_closed) closed, after \(seen.slow_closed_after.suffix(3)) s")
        #expect(seen.slow_closed_after.min() ?? 0 >= 2.5, "closed before the header timeout: \(seen.slow_closed_after.prefix(3))")
        #expect(seen.idle_closed == 300 && (seen.idle_closed_after.max() ?? 99) < 7, "idle: \(seen.idle_closed) closed, after \(seen.idle_closed_after.suffix(3)) s")
        try await SlowSourceEndToEndTests.expectBystanderUntouched(cluster, bystander, pid: pid)
    }
}
