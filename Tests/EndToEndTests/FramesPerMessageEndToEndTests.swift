// A bot that asks for several frames per message (`/bot?…&frames=3`, docs/bot-protocol.md) hears
// its session in messages of three packets: the very packets, in the same order, that a bot of
// one frame per message gets, in a third of the messages. A value outside 1…10 is refused with
// close code 4400 and why (a plain GET: 400). Beside them a bystander hears its tone, with the engine's pid and the
// Router's link unchanged.
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@Suite(.serialized) struct FramesPerMessageEndToEndTests {
    @Test func aBotOfThreeFramesPerMessageHearsEveryPacketInAThirdOfTheMessages() async throws {
        let (cluster, bystander, pid) = try await SlowSourceEndToEndTests.pairWithABystander()
        defer {
            bystander.close()
            Task { [cluster] in await cluster.stop() }
        }

        let batched = SessionListener(session: "batched", routerPort: cluster.routerPort, bot: true, frames: 3)
        let plain = SessionListener(session: "batched", routerPort: cluster.routerPort, bot: true)
        defer {
            batched.close()
            plain.close()
        }
        #expect(await eventually { batched.isConnected && plain.isConnected })
        #expect(try await cluster.play("batched", "tone-660.mp3").status == 202)
        #expect(await batched.hears(660))
        #expect(await eventually { batched.audio().count >= 150 })

        let mine = batched.audio().map(\.packet)
        let theirs = plain.audio().map(\.packet)
        #expect(theirs.count >= mine.count && Array(theirs.prefix(mine.count)) == mine, "\(mine.count) packets against \(theirs.count)")
        // Three to a message, but for the messages an event sent early (a `ready`, each `progress`).
        let messages = batched.audioMessages
        #expect(messages * 3 >= mine.count && messages * 2 < mine.count, "\(messages) messages for \(mine.count) packets")

        let url = "ws://127.0.0.1:\(cluster.routerPort)/bot?guild=batched&token=\(TonearmCluster.botToken)&frames="
        for bad in ["0", "11", "x", "-1", "99999999999999999999", ""] {
            let probe = try await wsProbe(url + bad, "nopong", seconds: 2)
            #expect(probe.close_code == 4400 && probe.close_reason?.hasPrefix("invalid_frames:") == true, "frames=\(bad): \(probe)")
        }
        // A plain GET (no upgrade) gets the JSON error.
        let plainGet = try await cluster.call(.GET, "/bot?guild=batched&frames=x")
        #expect(plainGet.status == 400 && (plainGet.json["error"] as? [String: Any])?["code"] as? String == "invalid_frames")
        #expect(batched.isConnected && plain.isConnected)
        try await SlowSourceEndToEndTests.expectBystanderUntouched(cluster, bystander, pid: pid)
    }
}
