// DAVE on Tonearm's own voice connection: the Router with tonearm-dave beside it
// (bridges/dave/tonearm_dave.py, davey) and a stand-in voice server that requires DAVE and plays
// Discord's part of the MLS group (Tests/Fixtures/dave_standin.py: the external sender with
// rfc9420, and listeners of its own with davey that open every frame). The stand-in's listener
// founds the group; Tonearm joins it by a welcome; a second listener joins later and Tonearm
// commits that addition itself; a forced close (4015) is resumed with the group as it was.
import Foundation
import Testing
import TestSupport

/// tonearm-dave, started for one test, on a socket of its own.
final class DaveProcess: Sendable {
    let socket: String
    private let process: FixtureProcess

    init() throws {
        socket = NSTemporaryDirectory() + "tonearm-dave-\(UUID().uuidString.prefix(8)).sock"
        process = try FixtureProcess(script: "../../bridges/dave/tonearm_dave.py", arguments: ["--socket", socket])
        guard process.readyLine.contains("\"socket\"") else { throw FixtureError("tonearm-dave did not start: \(process.readyLine)") }
    }

    func stop() { process.stop() }
}

@Suite(.serialized) struct DaveEndToEndTests {
    /// A stand-in that requires DAVE, guild-dave's call in channel 2000; tonearm-dave; the engine
    /// and a Router with both.
    static func call() async throws -> (StandInVoiceServer, DaveProcess, TonearmCluster) {
        let voice = try StandInVoiceServer(arguments: ["--dave", "--dave-required", "--heartbeat-ms", "500"])
        let sidecar = try DaveProcess()
        try await voice.control("/channel?server_id=guild-dave&channel_id=2000")
        let cluster = try TonearmCluster(
            tones: [440, 660], seconds: 30,
            environment: ["TONEARM_VOICE_CA_FILE": voice.authority, "TONEARM_DAVE_SOCKET": sidecar.socket])
        try await cluster.startBoth()
        return (voice, sidecar, cluster)
    }

    @Test func everyFrameIsOpenedByTheCallsListenersAcrossACommitAndAResume() async throws {
        let (voice, sidecar, cluster) = try await Self.call()
        defer { voice.stop(); sidecar.stop(); Task { [cluster] in await cluster.stop() } }
        let bot = SessionListener(session: "guild-dave", routerPort: cluster.routerPort, bot: true)
        defer { bot.close() }
        #expect(await eventually { bot.isConnected })
        try await bot.send(bot.voiceCommand(id: 1, endpoint: voice.endpoint))
        #expect(await bot.reply(1)?["ok"] as? Bool == true)
        #expect(await eventually { bot.voiceStates().contains { $0["state"] as? String == "connected" } }, "\(bot.voiceStates())")
        #expect(try await cluster.play("guild-dave", "tone-440.mp3").status == 202)

        func stream() async throws -> [String: Any] { try await voice.streams().values.first ?? [:] }
        func frames(_ kind: String) async throws -> Int { ((try await stream()["dave"] as? [String: Any])?[kind] as? Int) ?? 0 }
        let joined = await eventually(timeout: .seconds(10)) { ((try? await frames("dave")) ?? 0) >= 150 }
        let report = joined ? [:] : ((try? await voice.report()) ?? [:])
        #expect(joined, "\(report)")
        #expect(try await voice.events("identify").first?["max_dave_protocol_version"] as? Int == 1)
        // The call's privacy code (DAVE's displayable code of the epoch, 30 digits) goes to the bot.
        #expect(await eventually { bot.voiceStates().contains { ($0["privacy_code"] as? String)?.count == 30 } }, "\(bot.voiceStates())")

        // A second listener joins: Tonearm's side commits the addition (op 28).
        try await voice.control("/listener?server_id=guild-dave&user_id=900000000000000002")
        #expect(await eventually(timeout: .seconds(5)) { ((try? await voice.call("guild-dave")["epoch"] as? Int) ?? 0) == 2 })
        // Both sides show the same privacy code for the new epoch (the group's, not a guess).
        let code = try await voice.call("guild-dave")["privacy_code"] as? String
        #expect(code != nil)
        #expect(await eventually { bot.voiceStates().last { $0["privacy_code"] != nil }?["privacy_code"] as? String == code },
                "the stand-in's listener shows \(code ?? "-"), the bot was told \(bot.voiceStates().compactMap { $0["privacy_code"] })")
        let before = try await frames("dave")
        #expect(await eventually(timeout: .seconds(5)) { ((try? await frames("dave")) ?? 0) >= before + 100 })

        // Discord closes the socket (4015): resumed at once, the group as it was, the frames still
        // opened. (A resume once waited 5 s for the old socket's TLS close_notify.)
        try await voice.close(code: 4015)
        #expect(await eventually(timeout: .seconds(10)) { ((try? await voice.events("resume").count) ?? 0) == 1 })
        let closedAt = try await voice.events("forced_close").first?["t"] as? Double ?? 0
        let resumedAt = try await voice.events("resume").first?["t"] as? Double ?? .infinity
        #expect(resumedAt - closedAt < 1, "resumed \(resumedAt - closedAt) s after the close")
        let resumed = try await frames("dave")
        #expect(await eventually(timeout: .seconds(5)) { ((try? await frames("dave")) ?? 0) >= resumed + 100 })

        let call = try await voice.call("guild-dave")
        let commits = (call["events"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == "commit" }
        #expect(commits.map { $0["committer"] as? Int } == [nil, 1000], "\(commits)")
        #expect(call["epoch"] as? Int == 2, "\(call)")
        let heard = try await stream()
        let counts = heard["dave"] as? [String: Any] ?? [:]
        print("dave: epoch \(call["epoch"] ?? "-"), commits by \(commits.map { $0["committer"] ?? "the stand-in's listener" }), frames \(counts), packets \(heard["packets"] ?? "-"), gap p99 \(heard["gap_ms_p99"] ?? "-") ms, max \(heard["gap_ms_max"] ?? "-") ms")
        #expect(counts["plain"] as? Int == 0 && counts["failed"] as? Int == 0, "frames not opened with DAVE: \(heard)")
        #expect(heard["sequence_breaks"] as? Int == 0, "\(heard)")
        #expect(abs((heard["dominant_hz"] as? Double ?? 0) - 440) < 10, "\(heard)")
        #expect(try await voice.report()["unopened"] as? Int == 0)
    }
}

extension DaveEndToEndTests {
    /// tonearm-dave killed mid-call: the guild's voice connection ends and says why (no DAVE
    /// session, no frame anyone in the call could hear); a new `voice` while it is down is
    /// refused the same way; a guild without voice keeps playing, the engine and the Router's
    /// link untouched.
    @Test func withoutItsProcessADAVECallEndsAndSaysWhy() async throws {
        let (voice, sidecar, cluster) = try await Self.call()
        defer { voice.stop(); sidecar.stop(); Task { [cluster] in await cluster.stop() } }
        let enginePid = cluster.engine?.pid
        let bystander = SessionListener(session: "guild-bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("guild-bystander", "tone-660.mp3").status == 202)
        let bot = SessionListener(session: "guild-dave", routerPort: cluster.routerPort, bot: true)
        defer { bot.close() }
        #expect(await eventually { bot.isConnected })
        try await bot.send(bot.voiceCommand(id: 1, endpoint: voice.endpoint))
        #expect(try await cluster.play("guild-dave", "tone-440.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(10)) {
            (((try? await voice.streams().values.first?["dave"]) as? [String: Any])?["dave"] as? Int ?? 0) >= 50
        })

        sidecar.stop()
        #expect(await eventually(timeout: .seconds(5)) {
            bot.voiceStates().contains { ($0["reason"] as? String ?? "").contains("DAVE's process beside the Router went away") }
        }, "\(bot.voiceStates())")
        try await bot.send(bot.voiceCommand(id: 2, endpoint: voice.endpoint, token: "voice-token"))
        #expect(await eventually(timeout: .seconds(5)) {
            bot.voiceStates().contains { ($0["reason"] as? String ?? "").contains("tonearm-dave is not reachable") }
        }, "\(bot.voiceStates())")
        #expect(try await voice.report()["unopened"] as? Int == 0)
        let plain = try await voice.streams().values.map { ($0["dave"] as? [String: Any])?["plain"] as? Int ?? 0 }
        #expect(plain.allSatisfy { $0 == 0 }, "plain frames sent into a call that needs DAVE: \(plain)")

        #expect(await bystander.hears(660, within: .seconds(2)))
        #expect(cluster.engine?.pid == enginePid && cluster.engine?.isRunning == true)
        #expect(await cluster.routerLinkUp())
    }
}

extension StandInVoiceServer {
    /// A POST to the stand-in's control API (`/channel`, `/listener`).
    func control(_ path: String) async throws {
        let text = try await HTTPClientText.post("http://127.0.0.1:\(controlPort)\(path)")
        guard !text.contains("\"error\"") else { throw FixtureError("the stand-in refused \(path): \(text)") }
    }

    /// The DAVE call the stand-in keeps for a guild: its epoch, members and events.
    func call(_ guild: String) async throws -> [String: Any] {
        ((try await report()["calls"] as? [String: Any])?[guild] as? [String: Any]) ?? [:]
    }
}
