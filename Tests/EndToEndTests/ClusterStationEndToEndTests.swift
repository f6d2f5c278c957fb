// Stations across pairs: two guilds played by one pair follow a station another pair plays. They
// hear the station's very packets and its events, the station's pair sees one client for both
// (one relay per station per Router), its engine plays the station once and the followers' engine
// nothing; a station relayed so cannot follow; the relay ends once nobody follows; when the
// station's pair dies, the followers' pair takes the station on and they hear it again.
import Foundation
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ClusterStationEndToEndTests {
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func followersOnAnotherPairHearTheStationThroughOneRelay() async throws {
        // Pair 0 takes one session (the station); the guilds go to pair 1.
        let cluster = try PairCluster(count: 2, pairEnvironment: [0: ["TONEARM_MAX_SESSIONS": "1"]])
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start(only: [0])
        let (first, second) = (cluster.pairs[0], cluster.pairs[1])
        let radio = BalancedListener(session: "radio", addresses: { ["\(first.host):\(first.routerPort)"] }, start: 0)
        defer { radio.close() }
        #expect(await eventually(timeout: .seconds(10)) { radio.connectionCount > 0 && (try? cluster.owners()["radio"]) == "pair-0" })
        #expect(try await first.play("radio", "tone-660.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(10)) { radio.audio().count > 50 })

        try await cluster.start(only: [1])
        #expect(await eventually(timeout: .seconds(10)) { await second.clusterReady() }, "pair 1 never renewed")
        let guilds = ["guild-a", "guild-b"].map { guild in
            BalancedListener(session: guild, addresses: { ["\(second.host):\(second.routerPort)"] }, start: 0)
        }
        defer { for guild in guilds { guild.close() } }
        #expect(
            await eventually(timeout: .seconds(10)) {
                guilds.allSatisfy { $0.connectionCount > 0 } && (try? cluster.owners()).map { $0["guild-a"] == "pair-1" && $0["guild-b"] == "pair-1" } == true
            }, "the guilds are not played by pair 1: \((try? cluster.owners()) ?? [:])")
        #expect(try await second.play("guild-a", "tone-440.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(10)) { guilds[0].audio().count > 50 })

        // Guild A follows through pair 0's Router (forwarded to pair 1, its owner), guild B at pair 1.
        let followedAt = ContinuousClock.now
        let eventsBefore = guilds[0].events().count
        let followA = try await first.post(first.routerURL + "/api/sessions/guild-a/follow", #"{"station":"radio"}"#)
        #expect(followA.status == 200 && followA.body.contains(#""following":"radio""#), "\(followA)")
        let followB = try await second.post(second.routerURL + "/api/sessions/guild-b/follow", #"{"station":"radio"}"#)
        #expect(followB.status == 200, "\(followB)")
        for guild in guilds {
            #expect(
                await eventually(timeout: .seconds(10)) { guild.audio().filter { $0.at > followedAt + .seconds(1) }.count >= 100 },
                "\(guild.session) hears nothing after following")
            let heard = guild.audio().filter { $0.at > followedAt + .seconds(1) }.map(\.packet)
            #expect(abs(try tone(of: heard) - 660) < 15, "\(guild.session) does not hear the station")
        }
        // Told first of the station's track, as if it had begun; the station's events, not its state.
        let told = guilds[0].events().dropFirst(eventsBefore).compactMap { event -> String? in
            let type = event.json["type"] as? String ?? ""
            return type == "state" || type == "progress" ? nil : "\(type)/\(event.json["session_id"] ?? "")"
        }
        #expect(told.first == "ready/radio", "guild A was told \(told)")

        // The very packets of the station's own bot, at the same moments (within 20 ms).
        try await observe(for: .seconds(2))
        for guild in guilds {
            let skew = try StationEndToEndTests.skew(of: guild.audio(), against: radio.audio(), packets: 50, follower: guild.session)
            print("stations across pairs: \(guild.session) hears the station within \(skew) ms of its own bot")
            #expect(skew < 20, "\(guild.session) hears the station \(skew) ms apart from its own bot")
        }

        // Pair 0's engine plays the station, pair 1's nothing; pair 0 sees one client for both guilds.
        let plays = await cluster.enginePlays()
        #expect(plays[0] == ["radio"] && plays[1] == [], "the engines play \(plays)")
        #expect(try await Self.clients(of: "radio", at: first) == 2, "the station's clients: its bot and one relay")
        // Operators see the relay from both sides, in /health and /metrics.
        #expect(try await Self.relays(at: second) == [0, 1, 0], "pair 1's Router: one station relayed here")
        #expect(try await Self.relays(at: first) == [0, 0, 1], "pair 0's Router: one relay served")
        let gauge = try await HTTPClientText.get(second.routerURL + "/metrics").split(separator: "\n")
            .first { $0.hasPrefix("tonearm_router_station_relays ") }
        #expect(gauge.flatMap { Double($0.split(separator: " ").last ?? "") } == 1, "pair 1's metrics: \(String(describing: gauge))")

        // The station is followed from pair 1: it may not follow another session.
        let chain = try await first.post(first.routerURL + "/api/sessions/radio/follow", #"{"station":"guild-b"}"#)
        #expect(chain.status == 409 && chain.body.contains("\"session_followed\""), "\(chain)")

        // The station paused: its followers are told.
        #expect(try await first.post(first.routerURL + "/api/sessions/radio/pause").status == 200)
        #expect(
            await eventually(timeout: .seconds(5)) {
                guilds.allSatisfy { $0.events().contains { $0.json["type"] as? String == "paused" && $0.json["session_id"] as? String == "radio" } }
            }, "the followers were not told the station paused")

        // Nobody follows any more: the relay ends (5 s after), and pair 0 sees only the station's bot.
        for guild in guilds {
            let unfollowed = try await second.post(second.routerURL + "/api/sessions/\(guild.session)/unfollow")
            #expect(unfollowed.status == 200, "\(unfollowed)")
        }
        #expect(
            await eventually(timeout: .seconds(15)) {
                (try? await Self.clients(of: "radio", at: first)) == 1
            }, "the relay stayed after its followers left")
        #expect(
            await eventually(timeout: .seconds(5)) { (try? await Self.relays(at: second)) == [0, 0, 0] },
            "pair 1 still counts a relay after its followers left")

        // Following again, then the station's pair dies: the station is taken on by the
        // followers' pair (its stored state: playing), whose engine plays it there, and the
        // relay gives way to it. The followers hear the station again.
        #expect(try await first.post(first.routerURL + "/api/sessions/radio/resume").status == 200)
        for guild in guilds {
            let followed = try await second.post(second.routerURL + "/api/sessions/\(guild.session)/follow", #"{"station":"radio"}"#)
            #expect(followed.status == 200, "\(followed)")
        }
        let resumedAt = ContinuousClock.now
        for guild in guilds {
            #expect(await eventually(timeout: .seconds(10)) { guild.audio().filter { $0.at > resumedAt }.count >= 50 })
        }
        // What the taking pair resumes is what was stored: the station playing.
        #expect(
            await eventually(timeout: .seconds(10)) {
                (try? cluster.postgres.sql("SELECT snapshot FROM tonearm_session WHERE id = 'radio'"))?.contains("playing") == true
            }, "the station's state was never stored as playing")
        await cluster.kill(0)
        let killedAt = ContinuousClock.now
        for guild in guilds {
            #expect(
                await eventually(timeout: .seconds(20)) { guild.audio().filter { $0.at > killedAt }.count >= 100 },
                "\(guild.session) is not heard again after the station's pair died")
            #expect(abs(try tone(of: guild.audio().filter { $0.at > killedAt }.suffix(100).map(\.packet)) - 660) < 15)
        }
        let back = guilds.compactMap { $0.audio().first { $0.at > killedAt }?.at }.map { milliseconds($0 - killedAt) }
        print("stations across pairs: the followers heard the station again \(back) ms after its pair was killed")
        #expect(try cluster.owners()["radio"] == "pair-1")
        let after = await cluster.enginePlays()
        #expect(after[1] == ["radio"], "pair 1's engine plays \(after)")
        await cluster.stop()
    }

    /// What `pair`'s Router says it relays in `/health`: relayed clients, stations relayed here,
    /// relays served.
    static func relays(at pair: TonearmCluster) async throws -> [Int] {
        let cluster = try await pair.getJSON(pair.routerURL + "/health")?["cluster"] as? [String: Any]
        return ["relayed_clients", "station_relays", "station_relays_served"].map { cluster?[$0] as? Int ?? -1 }
    }

    /// The connected clients of `session` at `pair`'s Router (its listing's count).
    static func clients(of session: String, at pair: TonearmCluster) async throws -> Int? {
        let listing = try await pair.getJSON(pair.routerURL + "/api/sessions", token: TonearmCluster.botToken)
        let sessions = listing?["sessions"] as? [[String: Any]] ?? []
        return sessions.first { $0["session_id"] as? String == session }?["clients"] as? Int
    }
}
