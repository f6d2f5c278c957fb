// Inputs any client can send that once reached another session, each beside a bystander that
// must keep hearing its own tone, with the engine process and the Router's engine link unchanged.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import Testing
import TestSupport

/// `id` with every byte but the unreserved ones percent-encoded, as a careful client sends it.
func escaped(_ id: String) -> String {
    let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
    return id.addingPercentEncoding(withAllowedCharacters: unreserved) ?? id
}

extension TonearmCluster {
    /// The Router's count of engine connections so far (1 while the first link holds).
    func engineConnects() async throws -> Int? {
        let health = try await getJSON(routerURL + "/health")
        return (health?["engine"] as? [String: Any])?["connects"] as? Int
    }
}

@Suite(.serialized) struct IsolationEndToEndTests {
    /// Ids that differ only in escaping are different sessions, end to end: two bots, two tones,
    /// each hears its own. (Before: the Router decoded query ids twice and sent ids to the engine
    /// unescaped, so `x%41` and `xA` were one engine session.)
    @Test(arguments: [("x%41", "xA"), ("a%2Fb", "a/b"), ("q?x#1", "q")])
    func lookAlikeIdsAreDifferentSessions(first: String, second: String) async throws {
        let cluster = try TonearmCluster(tones: [440, 660], seconds: 20)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let pid = try #require(cluster.engine?.pid)
        let one = SessionListener(session: escaped(first), routerPort: cluster.routerPort, bot: true)
        let two = SessionListener(session: escaped(second), routerPort: cluster.routerPort, bot: true)
        defer { one.close(); two.close() }
        #expect(await eventually { one.isConnected && two.isConnected })
        #expect(try await cluster.call(.POST, "/api/sessions/\(escaped(first))/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        #expect(try await cluster.call(.POST, "/api/sessions/\(escaped(second))/play", #"{"url":"tone-660.mp3"}"#).status == 202)
        #expect(await one.hears(440), "\(first) hears \((try? one.lastTone()) ?? 0) Hz")
        #expect(await two.hears(660), "\(second) hears \((try? two.lastTone()) ?? 0) Hz")
        try await observe(for: .seconds(1))
        #expect(try abs(one.lastTone() - 440) < 5 && abs(two.lastTone() - 660) < 5)
        let stateOne = try await cluster.state(escaped(first)), stateTwo = try await cluster.state(escaped(second))
        #expect(stateOne["session_id"] as? String == first && stateTwo["session_id"] as? String == second)
        let sessions = try await cluster.getJSON(cluster.engineURL + "/sessions")
        let engineIDs = ((sessions?["sessions"] as? [[String: Any]]) ?? []).compactMap { $0["session_id"] as? String }
        #expect(Set(engineIDs) == [first, second], "the engine's sessions: \(engineIDs)")
        #expect(cluster.engine?.pid == pid && cluster.engine?.isRunning == true)
        #expect(try await cluster.engineConnects() == 1)
    }

    /// Sent with curl, which puts the path on the wire as given (URL types would escape the `%`).
    @Test func anIdThatIsNotValidPercentEncodingIsRefused() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 5)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let long = String(repeating: "a", count: 25)
        for path in ["/api/sessions/x%zz/play", "/api/sessions/%25%/play", "/api/sessions/\(long)/play"] {
            let (status, body) = try curl(cluster.routerURL + path, token: TonearmCluster.botToken)
            #expect(status == 400 && body.contains("invalid_session_id"), "\(path): \(status) \(body)")
        }
        let (status, body) = try curl(cluster.engineURL + "/session/x%zz/play")
        #expect(status == 400 && body.contains("invalid_session_id"), "engine: \(status) \(body)")
    }
}

extension IsolationEndToEndTests {
    /// Positions, volumes and indices at the ends of 64 bits, on both processes, while a
    /// bystander plays: each is refused with 400 and a sentence, and nothing else notices.
    @Test func extremeNumbersAreRefusedClearlyOnBothProcesses() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 20)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let pid = try #require(cluster.engine?.pid)
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.call(.POST, "/api/sessions/bystander/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        #expect(try await cluster.call(.POST, "/api/sessions/victim/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        #expect(await bystander.hears(440))
        let router: [(String, String, String)] = [
            ("/api/sessions/victim/seek", #"{"position_ms":9223372036854775807}"#, "invalid_position"),
            ("/api/sessions/victim/seek", #"{"position_ms":-9223372036854775808}"#, "invalid_position"),
            ("/api/sessions/victim/seek", #"{"position_ms":1e300}"#, ""),
            ("/api/sessions/victim/volume", #"{"volume":9223372036854775807}"#, "invalid_volume"),
            ("/api/sessions/victim/jump", #"{"index":9223372036854775807}"#, ""),
            ("/api/sessions/victim/jump", #"{"index":-1}"#, ""),
        ]
        for (path, body, code) in router {
            let reply = try await cluster.call(.POST, path, body)
            let error = reply.json["error"] as? [String: Any]
            #expect(reply.status == 400 && (code.isEmpty || error?["code"] as? String == code), "\(path) \(body): \(reply)")
            #expect((error?["message"] as? String)?.isEmpty == false)
        }
        let engine: [(String, String)] = [
            ("/session/victim/seek", #"{"position_ms":9223372036854775807}"#),
            ("/session/victim/volume", #"{"volume":-9223372036854775808}"#),
            ("/session/other/play", #"{"url":"tone-440.mp3","start_ms":9223372036854775807}"#),
        ]
        for (path, body) in engine {
            let (status, text) = try curl(cluster.engineURL + path, body: body)
            #expect(status == 400, "engine \(path) \(body): \(status) \(text)")
        }
        try await observe(for: .milliseconds(500))
        #expect(try abs(bystander.lastTone() - 440) < 5)
        let gaps = zip(bystander.audio().dropFirst(), bystander.audio()).map { milliseconds($0.at - $1.at) }
        #expect(gaps.suffix(100).max() ?? 0 < 150, "the bystander had a gap of \(gaps.suffix(100).max() ?? 0) ms")
        #expect(cluster.engine?.pid == pid && cluster.engine?.isRunning == true)
        #expect(try await cluster.engineConnects() == 1)
    }
}

extension IsolationEndToEndTests {
    /// One client minting identities and playing in each cannot take the whole pool: browsers
    /// hold at most TONEARM_BROWSER_PLAYS plays, a bot still plays, and a stopped browser play
    /// frees its place at once.
    @Test func browsersHoldOnlyTheirShareOfThePoolAndBotsStillPlay() async throws {
        let cluster = try TonearmCluster(
            tones: [440, 660], seconds: 20, environment: ["TONEARM_MAX_SESSIONS": "4", "TONEARM_BROWSER_PLAYS": "2"])
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        var identities: [(token: String, session: String)] = []
        for _ in 0..<3 {
            let minted = try await cluster.post(cluster.routerURL + "/api/identity", token: nil)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(minted.body.utf8)) as? [String: Any])
            identities.append((try #require(object["token"] as? String), try #require(object["session_id"] as? String)))
        }
        for identity in identities.prefix(2) {
            #expect(try await cluster.play(identity.session, "tone-440.mp3", token: identity.token).status == 202)
        }
        var request = HTTPClientRequest(url: cluster.routerURL + "/api/sessions/\(identities[2].session)/play")
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(identities[2].token)")
        request.body = .bytes(ByteBuffer(string: #"{"url":"tone-440.mp3"}"#))
        let refused = try await cluster.client.execute(request, timeout: .seconds(10))
        let body = String(buffer: try await refused.body.collect(upTo: 1 << 16))
        #expect(refused.status == .serviceUnavailable && body.contains("browser_share_exhausted"), "\(refused.status) \(body)")
        #expect(refused.headers.first(name: "Retry-After") == "30")

        // A bot (a guild) still gets a play and is heard.
        let guild = SessionListener(session: "guild", routerPort: cluster.routerPort, bot: true)
        defer { guild.close() }
        #expect(await eventually { guild.isConnected })
        #expect(try await cluster.play("guild", "tone-660.mp3").status == 202)
        #expect(await guild.hears(660))

        // One browser stops: the third may play now.
        #expect(try await cluster.post(cluster.routerURL + "/api/sessions/\(identities[0].session)/stop", token: identities[0].token).status == 200)
        #expect(try await cluster.play(identities[2].session, "tone-440.mp3", token: identities[2].token).status == 202)
    }
}

/// POSTs `body` (a play of tone-440.mp3 unless given) to `url` exactly as written; the status and the body.
func curl(_ url: String, token: String? = nil, body: String = #"{"url":"tone-440.mp3"}"#) throws -> (Int, String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments =
        ["curl", "-s", "--path-as-is", "-X", "POST", "-H", "Content-Type: application/json", "-d", body,
         "-w", "\n%{http_code}", url] + (token.map { ["-H", "Authorization: Bearer \($0)"] } ?? [])
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
}

extension IsolationEndToEndTests {
    /// One address cannot mint identities without end: after the burst it is told to wait (429,
    /// Retry-After), while a bot keeps playing. X-Forwarded-For picks the client only behind a
    /// trusted proxy: sent by anyone else it changes nothing.
    @Test func identitiesAreRateLimitedPerClientAddress() async throws {
        func mint(_ cluster: TonearmCluster, forwardedFor: String? = nil) async throws -> (Int, String, String?) {
            var request = HTTPClientRequest(url: cluster.routerURL + "/api/identity")
            request.method = .POST
            if let forwardedFor { request.headers.add(name: "X-Forwarded-For", value: forwardedFor) }
            let response = try await cluster.client.execute(request, timeout: .seconds(10))
            let body = String(buffer: try await response.body.collect(upTo: 1 << 16))
            return (Int(response.status.code), body, response.headers.first(name: "Retry-After"))
        }
        let cluster = try TonearmCluster(
            tones: [440], seconds: 20, environment: ["TONEARM_IDENTITY_BURST": "3", "TONEARM_IDENTITY_RATE": "2"])
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("bystander", "tone-440.mp3").status == 202)
        #expect(await bystander.hears(440))
        for n in 1...3 {
            let (status, body, _) = try await mint(cluster, forwardedFor: "198.51.100.\(n)")
            #expect(status == 200 && body.contains("\"token\""), "identity \(n): \(status) \(body)")
        }
        let (status, body, retryAfter) = try await mint(cluster, forwardedFor: "198.51.100.99")
        #expect(status == 429 && body.contains("rate_limited") && body.contains("try again later"), "\(status) \(body)")
        #expect(retryAfter.flatMap(Int.init).map { (1...31).contains($0) } == true, "Retry-After: \(retryAfter ?? "none")")
        try await observe(for: .milliseconds(300))
        #expect(try abs(bystander.lastTone() - 440) < 5)
        #expect(try await cluster.engineConnects() == 1)

        // Behind a proxy the operator trusts (here the test itself, on 127.0.0.1), each forwarded
        // address has its own allowance.
        let proxied = try TonearmCluster(
            tones: [], environment: [
                "TONEARM_IDENTITY_BURST": "1", "TONEARM_IDENTITY_RATE": "1", "TONEARM_TRUSTED_PROXIES": "127.0.0.1",
            ])
        try await proxied.startBoth()
        defer { Task { [proxied] in await proxied.stop() } }
        #expect(try await mint(proxied, forwardedFor: "198.51.100.1").0 == 200)
        #expect(try await mint(proxied, forwardedFor: "198.51.100.2").0 == 200)
        #expect(try await mint(proxied, forwardedFor: "203.0.113.9, 198.51.100.1").0 == 429, "the proxy's own entry counts")
    }
}
