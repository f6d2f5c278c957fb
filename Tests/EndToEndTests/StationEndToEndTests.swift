// Stations (docs/router-api.md): guilds follow a session and hear it — the very packets its own
// bot hears, at the same moment — while the engine plays it once. A follower's other controls
// are refused until it unfollows; a station's pause reaches its followers; a tab follows only
// with the station's listen token; chains are refused. Beside them a bystander hears its tone,
// with the engine's pid and the Router's link unchanged.
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct StationEndToEndTests {
    @Test func guildsThatFollowAStationHearItsPacketsTogetherAndTheEnginePlaysItOnce() async throws {
        let (cluster, bystander, pid) = try await SlowSourceEndToEndTests.pairWithABystander(tones: [440, 550, 660])
        defer {
            bystander.close()
            Task { [cluster] in await cluster.stop() }
        }
        let radio = SessionListener(session: "radio", routerPort: cluster.routerPort, bot: true)
        let guildA = SessionListener(session: "guild-a", routerPort: cluster.routerPort, bot: true)
        let guildB = SessionListener(session: "guild-b", routerPort: cluster.routerPort, bot: true, frames: 3)
        defer {
            for listener in [radio, guildA, guildB] { listener.close() }
        }
        #expect(await eventually { radio.isConnected && guildA.isConnected && guildB.isConnected })
        #expect(try await cluster.play("radio", "tone-660.mp3").status == 202)
        #expect(try await cluster.play("guild-a", "tone-550.mp3").status == 202)
        #expect(await radio.hears(660))
        #expect(await guildA.hears(550))

        // Guild A follows over REST: what it played stops, and it hears the station, told first
        // of the station's track as if it had begun (a bot sets its speaking flag on `ready`);
        // its own play's end is not passed on.
        let beforeFollowing = guildA.all.count
        let followed = try await cluster.call(.POST, "/api/sessions/guild-a/follow", #"{"station":"radio"}"#)
        #expect(followed.status == 200 && followed.json["following"] as? String == "radio", "\(followed)")
        #expect(await guildA.hears(660), "guild A does not hear the station")
        let told = guildA.events(from: beforeFollowing).compactMap { "\($0["type"] ?? "")/\($0["session_id"] ?? "")" }
        #expect(told.first == "ready/radio" && !told.contains("finished/guild-a"), "guild A was told \(told)")
        // Guild B (three frames per message) follows from its own bot connection.
        try await guildB.send(#"{"op":"follow","station":"radio","id":1}"#)
        #expect(await guildB.reply(1)?["ok"] as? Bool == true)
        #expect(await guildB.hears(660), "guild B does not hear the station")

        // The engine plays the station and the bystander; the followers cost it no play.
        let engineSessions = try await cluster.getJSON(cluster.engineURL + "/sessions")?["sessions"] as? [[String: Any]] ?? []
        let active = ["extracting", "streaming", "paused"]
        let playing = Set(engineSessions.filter { active.contains($0["state"] as? String ?? "") }.compactMap { $0["session_id"] as? String })
        #expect(playing == ["radio", "bystander"], "the engine plays \(playing)")

        // The very packets the station's own bot hears, each at the same moment (within 20 ms;
        // a bot of three frames per message gets a message's first frame 40 ms later, by design).
        try await observe(for: .seconds(2))
        let skewA = try Self.skew(of: guildA, against: radio, packets: 50)
        let skewB = try Self.skew(of: guildB, against: radio, packets: 51)
        print("stations: guild A hears the station's packets within \(skewA) ms of its own bot, guild B (3 a message) within \(skewB) ms")
        #expect(skewA < 20, "guild A hears the station \(skewA) ms apart from its own bot")
        #expect(skewB < 40 + 20, "guild B hears the station \(skewB) ms apart from its own bot")

        // A follower's own controls are refused and say why; layers too.
        for (path, body) in [("play", #"{"url":"tone-440.mp3"}"#), ("pause", nil), ("volume", #"{"volume":50}"#), ("layers", #"{"url":"tone-440.mp3"}"#)] {
            let refused = try await cluster.call(.POST, "/api/sessions/guild-a/\(path)", body)
            #expect(refused.status == 409 && Self.code(refused.json) == "following", "\(path): \(refused)")
        }
        // Chains and nonsense are refused.
        let chained = try await cluster.call(.POST, "/api/sessions/guild-c/follow", #"{"station":"guild-a"}"#)
        #expect(chained.status == 409 && Self.code(chained.json) == "station_follows", "\(chained)")
        let followedFollows = try await cluster.call(.POST, "/api/sessions/radio/follow", #"{"station":"bystander"}"#)
        #expect(followedFollows.status == 409 && Self.code(followedFollows.json) == "session_followed", "\(followedFollows)")
        let itself = try await cluster.call(.POST, "/api/sessions/guild-c/follow", #"{"station":"guild-c"}"#)
        #expect(itself.status == 409 && Self.code(itself.json) == "follows_itself", "\(itself)")
        for bad in [#"{}"#, #"{"station":""}"#, #"{"station":"a b"}"#, #"{"station":"0123456789012345678901234"}"#, #"{"station":7}"#] {
            let refused = try await cluster.call(.POST, "/api/sessions/guild-c/follow", bad)
            #expect(refused.status == 400, "\(bad): \(refused)")
        }

        // Pausing the station tells every follower and silences them; resuming brings them back.
        let beforePause = (guildA.all.count, guildB.all.count)
        #expect(try await cluster.call(.POST, "/api/sessions/radio/pause").status == 200)
        #expect(await eventually {
            guildA.events(from: beforePause.0).contains { $0["type"] as? String == "paused" && $0["session_id"] as? String == "radio" }
                && guildB.events(from: beforePause.1).contains { $0["type"] as? String == "paused" }
        }, "a follower was not told of the pause")
        let pausedAt = guildA.all.count
        try await observe(for: .seconds(1))
        #expect(guildA.audio(from: pausedAt).count <= 2, "guild A heard \(guildA.audio(from: pausedAt).count) frames while the station was paused")
        #expect(try await cluster.call(.POST, "/api/sessions/radio/resume").status == 200)
        #expect(await eventually { guildA.audio(from: pausedAt).count >= 25 })

        // A tab follows only with the station's listen token.
        let me = try await ListenEndToEndTests().identity(cluster)
        let tab = SessionListener(session: me.session_id, routerPort: cluster.routerPort, token: me.token)
        defer { tab.close() }
        let withoutToken = try await cluster.post(cluster.routerURL + "/api/sessions/\(me.session_id)/follow", #"{"station":"radio"}"#, token: me.token)
        #expect(withoutToken.status == 403 && withoutToken.body.contains("station_forbidden"), "\(withoutToken)")
        let listen = try await cluster.call(.POST, "/api/sessions/radio/listen-token")
        let listenToken = try #require(listen.json["token"] as? String)
        let withToken = try await cluster.post(
            cluster.routerURL + "/api/sessions/\(me.session_id)/follow", #"{"station":"radio","token":"\#(listenToken)"}"#, token: me.token)
        #expect(withToken.status == 200, "\(withToken)")
        #expect(await tab.hears(660), "the tab does not hear the station")

        // Guild A unfollows: the station no longer reaches it, and it plays its own music again.
        let unfollowed = try await cluster.call(.POST, "/api/sessions/guild-a/unfollow")
        #expect(unfollowed.status == 200 && unfollowed.json["following"] == nil, "\(unfollowed)")
        let leftAt = guildA.all.count
        try await observe(for: .milliseconds(500))
        #expect(guildA.audio(from: leftAt).count <= 2, "guild A still hears the station after unfollowing")
        #expect(try await cluster.play("guild-a", "tone-550.mp3").status == 202)
        #expect(await guildA.hears(550))
        #expect(try await cluster.call(.POST, "/api/sessions/guild-a/unfollow").status == 409)
        #expect(try guildB.lastTone() > 655, "guild B stopped hearing the station when guild A left")
        #expect(radio.isConnected && guildA.isConnected && guildB.isConnected && tab.isConnected)
        try await SlowSourceEndToEndTests.expectBystanderUntouched(cluster, bystander, pid: pid)
    }

    /// A follower is stored following: after the Router is stopped and started again, its bot
    /// hears the station as soon as it is back.
    @Test func aFollowerFollowsAgainAfterTheRouterRestarts() async throws {
        let (cluster, bystander, _) = try await SlowSourceEndToEndTests.pairWithABystander(tones: [440, 660])
        defer {
            bystander.close()
            Task { [cluster] in await cluster.stop() }
        }
        #expect(try await cluster.play("radio", "tone-660.mp3").status == 202)
        #expect(await eventually { (try? await cluster.state("radio")["status"] as? String) == "playing" })
        #expect(try await cluster.call(.POST, "/api/sessions/guild-a/follow", #"{"station":"radio"}"#).status == 200)
        // SIGTERM: the Router writes what it holds before it goes.
        #expect(await cluster.router?.terminate() == true)
        try cluster.startRouter()
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() })
        let guildA = SessionListener(session: "guild-a", routerPort: cluster.routerPort, bot: true)
        defer { guildA.close() }
        #expect(await guildA.hears(660), "the follower does not hear its station after the restart")
        #expect(guildA.events().first?["type"] as? String == "ready", "a follower's new client is not told of the station's track first: \(guildA.texts().prefix(4))")
        #expect(try await cluster.state("guild-a")["following"] as? String == "radio")
        #expect(try await cluster.call(.POST, "/api/sessions/guild-a/play", #"{"url":"tone-440.mp3"}"#).status == 409)
    }

    static func code(_ json: [String: Any]) -> String? { (json["error"] as? [String: Any])?["code"] as? String }

    /// The largest difference in arrival (ms) between `follower`'s last `packets` packets and the
    /// same packets at `reference`, found as the window of `reference` they equal byte for byte.
    static func skew(of follower: SessionListener, against reference: SessionListener, packets: Int) throws -> Double {
        try skew(of: follower.audio(), against: reference.audio(), packets: packets, follower: follower.session)
    }

    static func skew(
        of heard: [(at: ContinuousClock.Instant, packet: [UInt8])], against theirs: [(at: ContinuousClock.Instant, packet: [UInt8])],
        packets: Int, follower: String
    ) throws -> Double {
        let mine = Array(heard.suffix(packets))
        guard mine.count == packets, theirs.count >= packets else { throw FixtureError("too few packets") }
        let bytes = mine.map(\.packet)
        for start in stride(from: theirs.count - packets, through: 0, by: -1)
        where theirs[start..<(start + packets)].map(\.packet) == bytes {
            return zip(mine, theirs[start..<(start + packets)]).map { abs(milliseconds($0.at - $1.at)) }.max() ?? 0
        }
        throw FixtureError("\(follower)'s last \(packets) packets are not the station's")
    }
}
