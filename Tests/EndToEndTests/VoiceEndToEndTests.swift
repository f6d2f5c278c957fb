// Tonearm's own Discord voice connection, judged by a stand-in voice server
// (Tests/Fixtures/voice_server.py: the voice gateway v8 over TLS, UDP with IP discovery, RTP
// opened as Discord opens it, the Opus decoded): a bot hands the guild's credentials with the
// `voice` command, and the stand-in hears the session's tone, continuous, with the silence frames
// on a pause; forced closes (4015, 4006) and a server move are survived; a server that requires
// DAVE refuses with 4017 and the bot hears it. Bad `voice` commands are refused beside a
// bystander guild that keeps playing, with the engine's process and the Router's link unchanged.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport

/// The stand-in voice server, started for one test.
final class StandInVoiceServer: Sendable {
    let wsPort: Int
    let controlPort: Int
    let authority: String
    private let process: FixtureProcess

    /// Where its certificate authority lives: another stand-in started with `--authority` and
    /// this directory is trusted by the same Router.
    var authorityDirectory: String { (authority as NSString).deletingLastPathComponent }

    init(arguments: [String] = []) throws {
        process = try FixtureProcess(script: "voice_server.py", arguments: arguments)
        guard let ready = (try? JSONSerialization.jsonObject(with: Data(process.readyLine.utf8))) as? [String: Any],
            let ws = ready["ws_port"] as? Int, let control = ready["control_port"] as? Int, let ca = ready["ca"] as? String
        else { throw FixtureError("the stand-in voice server did not start: \(process.readyLine)") }
        (wsPort, controlPort, authority) = (ws, control, ca)
    }

    /// What a bot's VOICE_SERVER_UPDATE would give: `host:port`.
    var endpoint: String { "localhost:\(wsPort)" }

    func report() async throws -> [String: Any] {
        let text = try await HTTPClientText.get("http://127.0.0.1:\(controlPort)/report")
        return (try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
    }

    /// Closes the voice sockets with `code`, as Discord's voice server may.
    func close(code: Int) async throws {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(controlPort)/close?code=\(code)")
        request.method = .POST
        _ = try await HTTPClient.shared.execute(request, timeout: .seconds(5))
    }

    func streams() async throws -> [String: [String: Any]] {
        (try await report()["streams"] as? [String: [String: Any]]) ?? [:]
    }

    /// The events it noted of `kind` (identify, resume, speaking, heartbeat, closed …).
    func events(_ kind: String) async throws -> [[String: Any]] {
        ((try await report()["events"] as? [[String: Any]]) ?? []).filter { $0["kind"] as? String == kind }
    }

    func stop() { process.stop() }
}

extension SessionListener {
    /// The `voice_state` events received so far.
    func voiceStates() -> [[String: Any]] {
        texts().filter { $0["type"] as? String == "voice_state" }
    }

    func voiceCommand(id: Int, endpoint: String, token: String = "voice-token") -> String {
        #"{"op":"voice","id":\#(id),"user_id":"1000","session_id":"s-\#(id)","channel_id":"2000","token":"\#(token)","endpoint":"\#(endpoint)"}"#
    }
}

@Suite(.serialized) struct VoiceEndToEndTests {
    /// A cluster whose Router trusts the stand-in's authority.
    static func cluster(trusting voice: StandInVoiceServer) async throws -> TonearmCluster {
        let cluster = try TonearmCluster(tones: [440, 660], seconds: 30, environment: ["TONEARM_VOICE_CA_FILE": voice.authority])
        try await cluster.startBoth()
        return cluster
    }

    @Test func theStandInHearsTheGuildContinuousWithSilenceOnPause() async throws {
        let voice = try StandInVoiceServer(arguments: ["--heartbeat-ms", "500"])
        defer { voice.stop() }
        let cluster = try await Self.cluster(trusting: voice)
        defer { Task { [cluster] in await cluster.stop() } }
        let bot = SessionListener(session: "guild-voice", routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bot.isConnected })
        try await bot.send(bot.voiceCommand(id: 1, endpoint: voice.endpoint))
        #expect(await bot.reply(1)?["ok"] as? Bool == true)
        #expect(await eventually { bot.voiceStates().contains { $0["state"] as? String == "connected" } }, "\(bot.voiceStates())")
        #expect(try await cluster.play("guild-voice", "tone-440.mp3").status == 202)

        // Four seconds of the tone at the stand-in: every packet opened, none missing, in order.
        #expect(await eventually(timeout: .seconds(10)) { ((try? await voice.streams().values.first?["packets"] as? Int) ?? 0) >= 200 })
        let streams = try await voice.streams()
        #expect(streams.count == 1)
        let stream = try #require(streams.values.first)
        let heard = try #require(stream["dominant_hz"] as? Double)
        #expect(abs(heard - 440) < 10, "the stand-in heard \(heard) Hz")
        #expect(stream["sequence_breaks"] as? Int == 0 && stream["timestamp_breaks"] as? Int == 0, "\(stream)")
        #expect(stream["counters_in_order"] as? Bool == true)
        #expect(try await voice.report()["unopened"] as? Int == 0)
        #expect(try await voice.events("speaking").first?["speaking"] as? Int == 1, "Speaking before the audio")
        // The same credentials again (a bot sends them on each connection to the Router): the
        // connection is kept, not made again.
        try await bot.send(bot.voiceCommand(id: 1, endpoint: voice.endpoint))
        #expect(await eventually {
            bot.texts().filter { $0["type"] as? String == "reply" && $0["id"] as? Int == 1 && $0["ok"] as? Bool == true }.count == 2
        })
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await voice.events("identify").count == 1, "the same credentials made a second connection")
        let heartbeats = try await voice.events("heartbeat")
        #expect(heartbeats.count >= 3 && (heartbeats.last?["seq_ack"] as? Int ?? -1) >= 1, "\(heartbeats)")
        #expect((stream["gap_ms_p99"] as? Double ?? 1_000) < 60, "packet intervals at the stand-in: \(stream)")

        // Pause: five silence frames, then Speaking 0 and nothing more.
        #expect(try await cluster.post(cluster.routerURL + "/api/sessions/guild-voice/pause").status == 200)
        #expect(await eventually(timeout: .seconds(3)) {
            ((try? await voice.events("speaking"))?.last?["speaking"] as? Int) == 0
        })
        let paused = try #require(try await voice.streams().values.first)
        #expect(paused["silence_frames"] as? Int == 5, "\(paused)")
        try await Task.sleep(for: .seconds(1))
        #expect(try await voice.streams().values.first?["packets"] as? Int == paused["packets"] as? Int, "packets sent while paused")

        // Resume: the tone again, the timestamp moved on by the pause, no sequence number skipped.
        #expect(try await cluster.post(cluster.routerURL + "/api/sessions/guild-voice/resume").status == 200)
        #expect(await eventually(timeout: .seconds(5)) {
            ((try? await voice.streams().values.first?["packets"] as? Int) ?? 0) > (paused["packets"] as? Int ?? 0) + 100
        })
        let resumed = try #require(try await voice.streams().values.first)
        #expect(resumed["sequence_breaks"] as? Int == 0, "\(resumed)")
        #expect(((resumed["timestamp_steps"] as? [Int]) ?? []).contains { $0 > 960 * 40 }, "the pause is not in the timestamps: \(resumed)")
        #expect(abs((resumed["dominant_hz"] as? Double ?? 0) - 440) < 10)
        bot.close()
    }

    @Test func forcedClosesAndAServerMoveAreSurvived() async throws {
        let voice = try StandInVoiceServer()
        defer { voice.stop() }
        let cluster = try await Self.cluster(trusting: voice)
        defer { Task { [cluster] in await cluster.stop() } }
        let bot = SessionListener(session: "guild-moves", routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bot.isConnected })
        #expect(try await cluster.play("guild-moves", "tone-440.mp3").status == 202)
        try await bot.send(bot.voiceCommand(id: 1, endpoint: voice.endpoint))
        #expect(await eventually(timeout: .seconds(10)) { ((try? await voice.streams().values.first?["packets"] as? Int) ?? 0) >= 50 })

        // 4015: the voice server crashed; the connection resumes the same session (op 7 → op 9).
        let ssrc = try #require(try await voice.streams().keys.first)
        try await voice.close(code: 4015)
        let resumed = await eventually(timeout: .seconds(5)) { ((try? await voice.events("resume")) ?? []).count == 1 }
        let seen = ((try? await voice.report()["events"] as? [[String: Any]]) ?? []).filter { $0["kind"] as? String != "heartbeat" }
        #expect(resumed, "\(seen)")
        let before = try await voice.streams()[ssrc]?["packets"] as? Int ?? 0
        #expect(await eventually(timeout: .seconds(5)) { ((try? await voice.streams()[ssrc]?["packets"] as? Int) ?? 0) > before + 50 })
        #expect(try await voice.streams().count == 1, "a resume keeps the SSRC")
        #expect(try await voice.streams()[ssrc]?["sequence_breaks"] as? Int == 0, "a resume keeps the sequence")
        // The audio does not wait for the new socket: no stall at the stand-in across the resume.
        let gap = try await voice.streams()[ssrc]?["gap_ms_max"] as? Double ?? 1_000
        #expect(gap < 150, "the longest gap between packets across the resume: \(gap) ms")

        // 4006: the session is gone; the connection identifies again and is heard on a new SSRC.
        try await voice.close(code: 4006)
        #expect(await eventually(timeout: .seconds(8)) { ((try? await voice.events("identify")) ?? []).count == 2 })
        #expect(await eventually(timeout: .seconds(8)) {
            ((try? await voice.streams().filter { $0.key != ssrc }.values.first?["packets"] as? Int) ?? 0) >= 50
        })
        let renewed = try #require(try await voice.streams().filter { $0.key != ssrc }.values.first)
        #expect(abs((renewed["dominant_hz"] as? Double ?? 0) - 440) < 10)

        // Discord moves the call: new credentials for another voice server, heard within a second
        // of the bot handing them over; the old server sees its socket closed.
        let moved = try StandInVoiceServer(arguments: ["--authority", voice.authorityDirectory])
        defer { moved.stop() }
        let asked = try #require(try await moved.report()["now"] as? Double)
        try await bot.send(bot.voiceCommand(id: 2, endpoint: moved.endpoint))
        #expect(await eventually(timeout: .seconds(5)) { ((try? await moved.streams().values.first?["packets"] as? Int) ?? 0) >= 25 })
        let first = try #require(try await moved.streams().values.first?["first_at"] as? Double)
        #expect(first - asked < 1.0, "the moved call was heard \(first - asked) s after the new credentials")
        #expect(abs((try await moved.streams().values.first?["dominant_hz"] as? Double ?? 0) - 440) < 10)
        #expect(await eventually { (try? await voice.report()["open_sockets"] as? Int) == 0 }, "the old voice socket stays open")
        bot.close()
    }

    @Test func badVoiceCommandsAreRefusedBesideABystanderAndDAVEIsRequired() async throws {
        let voice = try StandInVoiceServer(arguments: ["--dave-required"])
        defer { voice.stop() }
        let cluster = try await Self.cluster(trusting: voice)
        defer { Task { [cluster] in await cluster.stop() } }
        let enginePid = cluster.engine?.pid
        let bystander = SessionListener(session: "guild-bystander", routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("guild-bystander", "tone-660.mp3").status == 202)
        #expect(await bystander.hears(660))
        let bot = SessionListener(session: "guild-refused", routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bot.isConnected })
        func errorCode(_ id: Int) async -> String? {
            ((await bot.reply(id))?["error"] as? [String: Any])?["code"] as? String
        }
        for (id, text) in [
            (2, #"{"op":"voice","id":2,"user_id":"1000","session_id":"s","channel_id":"2000","token":"t","endpoint":"evil.example/x?"}"#),
            (3, #"{"op":"voice","id":3,"user_id":"not-a-snowflake","session_id":"s","channel_id":"2000","token":"t","endpoint":"localhost:1"}"#),
            (4, #"{"op":"voice","id":4,"user_id":"1000","session_id":"s","channel_id":"2000","endpoint":"localhost:1"}"#),
            (5, #"{"op":"voice","id":5,"user_id":1000,"session_id":"s","channel_id":"2000","token":"t","endpoint":"localhost:1"}"#),
            (6, #"{"op":"voice","id":6,"user_id":"1000","session_id":"s","channel_id":"2000","token":"t","endpoint":"localhost:99999"}"#),
        ] {
            try await bot.send(text)
            #expect(await errorCode(id) == "invalid_voice", "\(text)")
        }
        try await bot.send(#"{"op":"voice_leave","id":7}"#)
        #expect(await errorCode(7) == "voice_not_connected")
        // A browser tab may not make the Router connect anywhere.
        let browser = SessionListener(session: "guild-refused", routerPort: cluster.routerPort)
        #expect(await eventually { browser.isConnected })
        try await browser.send(browser.voiceCommand(id: 8, endpoint: voice.endpoint))
        #expect(((await browser.reply(8))?["error"] as? [String: Any])?["code"] as? String == "voice_needs_bot")

        // A voice server that requires DAVE: 4017, reported to the bot with Discord's code.
        try await bot.send(bot.voiceCommand(id: 9, endpoint: voice.endpoint))
        #expect(await bot.reply(9)?["ok"] as? Bool == true)
        #expect(await eventually(timeout: .seconds(5)) {
            bot.voiceStates().contains { $0["state"] as? String == "disconnected" && $0["code"] as? Int == 4017 }
        }, "\(bot.voiceStates())")
        #expect(try await voice.events("identify").count == 1, "4017 is not retried")

        #expect(await bystander.hears(660, within: .seconds(2)))
        #expect(cluster.engine?.pid == enginePid && cluster.engine?.isRunning == true)
        #expect(await cluster.routerLinkUp())
        bot.close()
        browser.close()
        bystander.close()
    }
}

/// The voice connection in a cluster: a guild's bot that sends its credentials on every
/// connection (as the reference bot does) keeps its voice when the guild's pair is stopped. The
/// stand-in sees the old pair's connection end, then the new owner's begin, never both at once.
@Suite(.serialized) struct ClusterVoiceEndToEndTests {
    /// Two pairs (or `count`), the guild on pair 0 with its voice heard at the stand-in through a
    /// bot at pair `botAt` that sends its credentials on every connection; `draining` pairs take no
    /// session. The first voice stream's SSRC.
    static func guildWithVoice(
        _ guild: String, voice: StandInVoiceServer, patience: BalancedListener.Patience?, count: Int = 2, botAt: Int = 0,
        draining: [Int] = []
    ) async throws -> (PairCluster, BalancedListener, String) {
        let cluster = try PairCluster(count: count, environment: ["TONEARM_VOICE_CA_FILE": voice.authority])
        try await cluster.start(only: [0])
        #expect(try await cluster.pairs[0].play(guild, "tone-440.mp3").status == 202)
        try await cluster.start(only: Array(1..<count))
        for index in draining {
            #expect(try await cluster.pairs[index].post(cluster.pairs[index].routerURL + "/api/cluster/drain").status == 200)
        }
        let credentials = #"{"op":"voice","id":1,"user_id":"1000","session_id":"s-1","channel_id":"2000","token":"voice-token","endpoint":"\#(voice.endpoint)"}"#
        let bot = BalancedListener(
            session: guild, addresses: { [cluster] in cluster.liveAddresses }, start: botAt, patience: patience, greeting: credentials)
        #expect(await eventually(timeout: .seconds(10)) { ((try? await voice.streams().values.first?["packets"] as? Int) ?? 0) >= 100 })
        return (cluster, bot, try #require(try await voice.streams().keys.first))
    }

    /// Once the voice is heard again on another SSRC: the silence between the first stream's last
    /// packet and the second's first, at the stand-in (negative: both at once).
    static func silenceAcrossTheMove(_ voice: StandInVoiceServer, first: String, within: Duration) async throws -> Double {
        #expect(await eventually(timeout: within) {
            ((try? await voice.streams().filter { $0.key != first }.values.first?["packets"] as? Int) ?? 0) >= 100
        }, "the guild's voice did not come back on the new owner")
        let streams = try await voice.streams()
        let before = try #require(streams[first])
        let after = try #require(streams.filter { $0.key != first }.values.first)
        #expect(abs((after["dominant_hz"] as? Double ?? 0) - 440) < 10)
        return (after["first_at"] as? Double ?? 0) - (before["last_at"] as? Double ?? 0)
    }

    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aStoppedPairsGuildKeepsItsVoiceOnTheNewOwner() async throws {
        let voice = try StandInVoiceServer()
        defer { voice.stop() }
        let (cluster, bot, first) = try await Self.guildWithVoice("voice-moves", voice: voice, patience: nil)
        defer { bot.close(); Task { [cluster] in await cluster.stop() } }
        await cluster.terminate(0)
        let silence = try await Self.silenceAcrossTheMove(voice, first: first, within: .seconds(15))
        print("cluster voice: silence at the stand-in across the hand-over \(Int(silence * 1000)) ms, codes \(bot.codes)")
        #expect(silence > 0, "two pairs sent the guild's voice at once (\(silence) s)")
        #expect(silence < 1, "the voice was silent \(silence) s across the hand-over")
        #expect(try await voice.events("identify").count == 2)
        await cluster.stop()
    }

    /// A bot relayed by a third pair stays connected while the guild moves from pair 0 to pair 1,
    /// so it sends no credentials again: the relay gives the new owner the bot's last `voice`.
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aRelayedBotsGuildKeepsItsVoiceOnTheNewOwner() async throws {
        let voice = try StandInVoiceServer()
        defer { voice.stop() }
        let (cluster, bot, first) = try await Self.guildWithVoice(
            "voice-relayed", voice: voice, patience: nil, count: 3, botAt: 2, draining: [2])
        defer { bot.close(); Task { [cluster] in await cluster.stop() } }
        await cluster.terminate(0)
        let silence = try await Self.silenceAcrossTheMove(voice, first: first, within: .seconds(15))
        print("cluster voice: silence at the stand-in across a relayed bot's hand-over \(Int(silence * 1000)) ms, codes \(bot.codes)")
        #expect(try cluster.owners()["voice-relayed"] == "pair-1")
        #expect(bot.codes.isEmpty, "the relayed bot was disconnected (\(bot.codes)): this test is about one that is not")
        #expect(silence > 0 && silence < 1, "the voice was silent \(silence) s across the hand-over")
        await cluster.stop()
    }

    /// A killed pair: its voice stops with it; the guild plays again on the other pair once the
    /// lease ends (3 s), and its voice comes back when the bot, reconnecting, sends its credentials
    /// to the new owner.
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func aKilledPairsGuildGetsItsVoiceBackOnTheNewOwner() async throws {
        let voice = try StandInVoiceServer()
        defer { voice.stop() }
        let (cluster, bot, first) = try await Self.guildWithVoice("voice-killed", voice: voice, patience: .init())
        defer { bot.close(); Task { [cluster] in await cluster.stop() } }
        await cluster.kill(0)
        let silence = try await Self.silenceAcrossTheMove(voice, first: first, within: .seconds(20))
        print("cluster voice: silence at the stand-in across a kill \(Int(silence * 1000)) ms, codes \(bot.codes)")
        #expect(silence > 0 && silence < 8, "the voice was silent \(silence) s across the kill")
        await cluster.stop()
    }
}
