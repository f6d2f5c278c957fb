// One upstream per session per Router (docs/cluster.md): the clients one Router relays to one
// session share one connection to the session's owner. Each still hears the session from its
// state on, each gets its own replies, and each command is judged under that client's own token
// at the owner (a browser token's play counted against the browsers' share, the bot token's not).
import Foundation
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct ClusterRelayEndToEndTests {
    @Test(.enabled(if: ClusterEndToEndTests.postgresInstalled)) func clientsOfOneSessionBehindAnotherPairShareOneUpstream() async throws {
        // Pair 0 alone at first: it owns the tab's session. Browser tokens may hold no play there
        // (TONEARM_BROWSER_PLAYS=0), so a browser token's play is refused by its rule alone.
        let cluster = try PairCluster(count: 2, environment: ["TONEARM_BROWSER_PLAYS": "0"])
        defer { Task { [cluster] in await cluster.stop() } }
        try await cluster.start(only: [0])
        let (owner, relaying) = (cluster.pairs[0], cluster.pairs[1])
        #expect(await eventually(timeout: .seconds(15)) { await owner.clusterReady() }, "pair 0 never renewed")
        let minted = try await owner.post(owner.routerURL + "/api/identity", token: nil)
        let identity = try JSONSerialization.jsonObject(with: Data(minted.body.utf8)) as? [String: Any]
        let session = try #require(identity?["session_id"] as? String), token = try #require(identity?["token"] as? String)
        #expect(try await owner.play(session, "tone-440.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(10)) { (try? cluster.owners()[session]) == "pair-0" })

        try await cluster.start(only: [1])
        #expect(await eventually(timeout: .seconds(15)) { await relaying.clusterReady() }, "pair 1 never renewed")
        // Through pair 1: a tab (its browser token), then, once it hears the session, a second tab
        // and an operator's dashboard on the bot token, joining the upstream already connected.
        let tab = SessionListener(session: session, routerPort: relaying.routerPort, token: token)
        defer { tab.close() }
        #expect(await eventually(timeout: .seconds(10)) { tab.audio().count > 25 }, "the first tab hears nothing")
        let secondTab = SessionListener(session: session, routerPort: relaying.routerPort, token: token)
        let dashboard = SessionListener(session: session, routerPort: relaying.routerPort)
        defer {
            secondTab.close()
            dashboard.close()
        }
        let clients = [tab, secondTab, dashboard]
        #expect(await eventually(timeout: .seconds(10)) { clients.allSatisfy { $0.audio().count > 50 } })
        for (name, client) in zip(["tab", "second tab", "dashboard"], clients) {
            guard case .text(let first)? = client.all.first?.message else {
                Issue.record("the \(name)'s first message is not text")
                continue
            }
            #expect(first.contains(#""type":"state""#), "the \(name)'s first message: \(first.prefix(80))")
            #expect(abs(try tone(of: client.audio().map(\.packet)) - 440) < 15, "the \(name) does not hear the session")
        }
        // Pair 1 relays three clients over one upstream; pair 0 serves one client for them.
        let relays = try await Self.relays(at: relaying)
        #expect(relays == [3, 1], "pair 1 relays \(relays) (clients, upstreams)")
        #expect(try await ClusterStationEndToEndTests.clients(of: session, at: owner) == 1, "the owner's clients of the session")
        #expect(try await Self.gauge("tonearm_router_relay_upstreams", at: relaying) == 1)

        // The same id from each: each is answered, once. The dashboard stops the session.
        try await dashboard.send(#"{"op":"stop","id":7}"#)
        #expect(await dashboard.reply(7)?["ok"] as? Bool == true)
        try await tab.send(#"{"op":"state","id":7}"#)
        try await secondTab.send(#"{"op":"volume","volume":50,"id":7}"#)
        let replies = await [tab.reply(7), secondTab.reply(7)]
        #expect(replies[0]?["ok"] as? Bool == true, "the tab: \(String(describing: replies[0]))")
        #expect(
            replies[1]?["ok"] as? Bool == true && (replies[1]?["state"] as? [String: Any])?["volume"] as? Int == 50,
            "the second tab: \(String(describing: replies[1]))")
        for client in clients {
            #expect(client.texts().filter { $0["type"] as? String == "reply" }.count == 1, "a client was sent another's reply")
        }
        // Each under its own token: the tab's play is a browser token's, refused by the owner's
        // rule; the dashboard's, over the same upstream, is the bot token's, and every client hears it.
        try await tab.send(#"{"op":"play","url":"tone-660.mp3","id":8}"#)
        let refused = await tab.reply(8)
        #expect(
            refused?["ok"] as? Bool == false && (refused?["error"] as? [String: Any])?["code"] as? String == "browser_share_exhausted",
            "the tab's play: \(String(describing: refused))")
        let before = clients.map { $0.count }
        try await dashboard.send(#"{"op":"play","url":"tone-660.mp3","id":9}"#)
        let played = await dashboard.reply(9)
        #expect(played?["ok"] as? Bool == true, "the dashboard's play: \(String(describing: played))")
        #expect(
            await eventually(timeout: .seconds(10)) {
                zip(clients, before).allSatisfy { client, start in client.count > start + 60 && client.audio(from: start + 60).count > 50 }
            })
        for (client, start) in zip(clients, before) where client.count > start + 60 {
            #expect(abs(try tone(of: client.audio(from: start + 60).map(\.packet)) - 660) < 15, "a client does not hear the bot's play")
        }

        // Clients leave; the upstream stays while one is left, and goes with the last.
        tab.close()
        secondTab.close()
        #expect(await eventually(timeout: .seconds(5)) { (try? await Self.relays(at: relaying)) == [1, 1] })
        let heard = dashboard.audio().count
        try await observe(for: .seconds(1))
        #expect(dashboard.audio().count > heard + 30, "the dashboard stopped hearing when the tabs left")
        dashboard.close()
        #expect(await eventually(timeout: .seconds(5)) { (try? await Self.relays(at: relaying)) == [0, 0] })
        #expect(await eventually(timeout: .seconds(5)) { (try? await ClusterStationEndToEndTests.clients(of: session, at: owner)) == 0 })
        await cluster.stop()
    }

    /// `relayed_clients` and `relay_upstreams` of `pair`'s `/health`.
    static func relays(at pair: TonearmCluster) async throws -> [Int] {
        let cluster = try await pair.getJSON(pair.routerURL + "/health")?["cluster"] as? [String: Any]
        return ["relayed_clients", "relay_upstreams"].map { cluster?[$0] as? Int ?? -1 }
    }

    static func gauge(_ name: String, at pair: TonearmCluster) async throws -> Double? {
        let line = try await HTTPClientText.get(pair.routerURL + "/metrics").split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") }
    }
}
