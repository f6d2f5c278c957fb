// The cluster tests' parts: pairs sharing one real PostgreSQL (each on this host, or each in a
// network namespace of its own on one bridge, to be cut off and mended), and bots that reach them
// through a "load balancer", reconnect as the reference bot does, and record what they hear.
import AsyncHTTPClient
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOWebSocket
import Synchronization
import TestSupport
import Testing

/// A bot connection that goes through a "load balancer": each (re)connection takes the next
/// Router of `addresses`, and it reconnects whenever its connection ends, as the reference bot
/// does. With `patience`, it also gives up on a connection that is not made within
/// `patience.connect` or that has been silent for `patience.silence` (a pair cut off without its
/// connections closing), as a bot with a receive timeout does: that connection is abandoned, not
/// waited out, and nothing it still delivers is recorded.
final class BalancedListener: Sendable {
    struct Patience: Sendable {
        var connect: Duration = .seconds(1)
        var silence: Duration = .milliseconds(1_500)
    }

    let session: String
    private let received = Mutex<[SessionListener.Received]>([])
    private let connections = Atomic<Int>(0)
    private let closeCodes = Mutex<[Int]>([])
    private let task = Mutex<Task<Void, Never>?>(nil)
    /// The connection whose messages are recorded; an abandoned one's are not.
    private let current = Atomic<Int>(0)
    private let lastHeard = Mutex(ContinuousClock.now)
    private let abandons = Atomic<Int>(0)

    /// Sent on every connection, as its first message (a bot's `voice` credentials).
    private let greeting: String?

    /// `addresses`: the Routers (host:port) the balancer sends to now.
    init(
        session: String, addresses: @escaping @Sendable () -> [String], start: Int, patience: Patience? = nil,
        greeting: String? = nil
    ) {
        self.session = session
        self.greeting = greeting
        let handle = Task { [self] in
            var turn = start
            var generation = 0
            while !Task.isCancelled {
                let live = addresses()
                guard !live.isEmpty else { return }
                let address = live[turn % live.count]
                turn += 1
                generation += 1
                current.store(generation, ordering: .relaxed)
                let code: Int?
                if let patience {
                    code = await connectWatched(address, generation: generation, patience: patience)
                } else {
                    code = await connect(address, generation: generation)
                }
                if let code { closeCodes.withLock { $0.append(code) } }
                // Moved to another pair (4012): at once, as the reference bot does.
                if code != 4012 { try? await Task.sleep(for: .milliseconds(100)) }
            }
        }
        task.withLock { $0 = handle }
    }

    /// One connection until it ends; its close code.
    private func connect(_ address: String, generation: Int, closeTimeout: Duration = .seconds(15)) async -> Int? {
        let url = "ws://\(address)/bot?guild=\(session)&token=\(TonearmCluster.botToken)"
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 16, closeTimeout: closeTimeout)
        let close = try? await WebSocketClient.connect(url: url, configuration: configuration, logger: Logger(label: "bot")) { inbound, outbound, _ in
            guard self.current.load(ordering: .relaxed) == generation else { return }
            self.connections.add(1, ordering: .relaxed)
            if let greeting = self.greeting { try await outbound.write(.text(greeting)) }
            self.lastHeard.withLock { $0 = .now }
            for try await message in inbound.messages(maxSize: 1 << 16) {
                guard self.current.load(ordering: .relaxed) == generation else { return }
                let now = ContinuousClock.now
                self.lastHeard.withLock { $0 = now }
                switch message {
                case .binary(let buffer):
                    self.received.withLock { $0.append(.init(at: now, message: .audio(Array(buffer.readableBytesView)))) }
                case .text(let text):
                    self.received.withLock { $0.append(.init(at: now, message: .text(text))) }
                }
            }
        }
        return close.map { Int(UInt16(webSocketErrorCode: $0.closeCode)) }
    }

    /// One connection, given up (and left to end by itself) when it is not made in time or goes
    /// silent; its close code when it ended by itself.
    private func connectWatched(_ address: String, generation: Int, patience: Patience) async -> Int? {
        let outcome = Mutex<Int??>(nil)
        let connectionsBefore = connections.load(ordering: .relaxed)
        let started = ContinuousClock.now
        let connection = Task {
            let code = await self.connect(address, generation: generation, closeTimeout: .seconds(1))
            outcome.withLock { $0 = .some(code) }
        }
        while !Task.isCancelled {
            if let code = outcome.withLock({ $0 }) { return code }
            let now = ContinuousClock.now
            let made = connections.load(ordering: .relaxed) > connectionsBefore
            if (!made && now - started > patience.connect) || (made && now - lastHeard.withLock({ $0 }) > patience.silence) {
                connection.cancel()
                abandons.add(1, ordering: .relaxed)
                return nil
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        connection.cancel()
        return nil
    }

    /// Connections given up for want of an answer.
    var abandoned: Int { abandons.load(ordering: .relaxed) }
    var connectionCount: Int { connections.load(ordering: .relaxed) }
    var codes: [Int] { closeCodes.withLock { $0 } }
    func close() { task.withLock { $0?.cancel() } }

    func audio() -> [(at: ContinuousClock.Instant, packet: [UInt8])] {
        received.withLock { $0 }.compactMap { if case .audio(let p) = $0.message { ($0.at, p) } else { nil } }
    }

    /// What this bot heard over `seconds` from `from`: the longest time between two frames (ms),
    /// and each 100 ms stretch's jump from where the one before ended in `source` (noise), with
    /// the lowest correlation met. Records an issue if a stretch is not found in the source.
    func continuity(from: ContinuousClock.Instant, seconds: Int, source: String, followRadius: Int = 24_000) throws
        -> (longestGapMS: Double, jumpsMS: [Double], worstScore: Double)
    {
        let audio = audio()
        let window = audio.filter { $0.at > from && $0.at < from + .seconds(seconds) }.map(\.at)
        let gap = zip(window, window.dropFirst()).map { $0.1 - $0.0 }.max() ?? .zero
        let gapMS = Double(gap.components.attoseconds) / 1e15 + Double(gap.components.seconds) * 1_000
        let firstPacket = try #require(audio.firstIndex { $0.at > from })
        // Where the first stretch is, about: the last `progress` before it and the time since.
        let progress = try #require(events().last { $0.at < audio[firstPacket].at && $0.json["type"] as? String == "progress" })
        let since = audio[firstPacket].at - progress.at
        let guessMS = (progress.json["position_ms"] as? Int ?? 0) + Int(since.components.attoseconds / 1_000_000_000_000_000)
        let placed = Continuity.jumps(
            heard: try decodeLeft(audio.map(\.packet)), from: firstPacket * 960, stretches: seconds * 10,
            reference: try MediaFixture.decodeMono(source), guess: guessMS * 48, followRadius: followRadius)
        #expect(placed.worstScore > 0.5, "\(session): a stretch heard is not in the source (correlation \(placed.worstScore))")
        #expect(placed.jumpsMS.count >= seconds * 9, "\(session): \(placed.jumpsMS.count) stretches placed")
        return (gapMS, placed.jumpsMS, placed.worstScore)
    }

    func events() -> [(at: ContinuousClock.Instant, json: [String: Any])] {
        received.withLock { $0 }.compactMap {
            guard case .text(let text) = $0.message,
                let json = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            else { return nil }
            return ($0.at, json)
        }
    }
}

/// Pairs sharing one PostgreSQL. With `namespace`, pair 0 runs inside it (engine and Router on
/// the namespace's address) and the others on this side of its link, so that traffic between
/// pair 0 and PostgreSQL can be cut while everything else still flows. With `network`, each pair
/// runs in a host of its own, any of which can be cut off from everything and mended.
final class PairCluster: @unchecked Sendable {
    // @unchecked: pairs are started and killed by the test's own task only.
    /// The cluster's database: one server, or pg_auto_failover's nodes.
    let postgres: any ClusterDatabaseServer
    let pairs: [TonearmCluster]
    let namespace: NetworkNamespace?
    let network: BridgedNetwork?
    let lease: Double
    private let down = Mutex<Set<Int>>([])

    init(
        count: Int = 3, lease: Double = 3, tones: [Int] = [440, 550, 660, 770, 880, 990], toneSeconds: Double = 120,
        noise: [Int] = [], noiseSeconds: Int = 120, noiseChannels: Int = 2, namespace: NetworkNamespace? = nil,
        network: BridgedNetwork? = nil, environment: [String: String] = [:], pairEnvironment: [Int: [String: String]] = [:],
        database: (any ClusterDatabaseServer)? = nil
    ) throws {
        self.namespace = namespace
        self.network = network
        self.lease = lease
        let postgres = try database ?? PostgresServer(alsoListenOn: namespace?.outside ?? network?.outside)
        self.postgres = postgres
        var pairs: [TonearmCluster] = []
        for index in 0..<count {
            let routerPort = try freePort()
            let host = network?.hosts[index].address ?? namespace.map { index == 0 ? $0.inside : $0.outside } ?? "127.0.0.1"
            let database = (network?.outside ?? namespace?.outside).map { postgres.url(host: $0) } ?? postgres.url(host: "127.0.0.1")
            let pair = try TonearmCluster(
                tones: [],
                environment: [
                    "TONEARM_DATABASE_URL": database, "TONEARM_PAIR_ID": "pair-\(index)",
                    "TONEARM_PAIR_ADDRESS": "http://\(host):\(routerPort)", "TONEARM_CLUSTER_LEASE": "\(lease)",
                    "TONEARM_NORMALIZE": "false", "TONEARM_HANDOVER_GRACE": "5",
                    // As a deployment sets it (docs/cluster.md): a token one pair signs is good at every pair.
                    "TONEARM_TOKEN_SECRET": "pair-cluster-test-secret-shared-by-every-pair",
                ].merging(environment) { _, extra in extra }.merging(pairEnvironment[index] ?? [:]) { _, extra in extra },
                routerPort: routerPort, host: host)
            if let launcher = network?.hosts[index].launcher ?? (index == 0 ? namespace?.launcher : nil) {
                pair.routerLauncher = launcher
                pair.engineLauncher = launcher
            }
            pairs.append(pair)
        }
        self.pairs = pairs
        // Made once, the same file in every pair's media folder.
        for tone in tones {
            let file = try MediaFixture.tone(tone, seconds: toneSeconds, into: pairs[0].mediaDirectory)
            for pair in pairs.dropFirst() {
                try FileManager.default.linkItem(atPath: file, toPath: pair.mediaDirectory + "/tone-\(tone).mp3")
            }
        }
        for seed in noise {
            let file = try Continuity.noise(seed: seed, seconds: noiseSeconds, into: pairs[0].mediaDirectory, channels: noiseChannels)
            for pair in pairs.dropFirst() {
                try FileManager.default.linkItem(atPath: file, toPath: pair.mediaDirectory + "/noise-\(seed).flac")
            }
        }
    }

    func start(only indices: [Int]? = nil) async throws {
        let started = (indices ?? Array(pairs.indices)).map { pairs[$0] }
        for pair in started {
            try pair.startEngine()
            try pair.startRouter()
        }
        for pair in started {
            let up = await eventually(timeout: .seconds(30)) { await pair.routerLinkUp() }
            #expect(up, "a pair's Router never reached its engine\(up ? "" : "\n" + pair.logTails())")
        }
    }

    /// The Routers (host:port) a load balancer would send to now (the pairs not killed).
    var liveAddresses: [String] {
        let down = down.withLock { $0 }
        return pairs.indices.filter { !down.contains($0) }.map { "\(pairs[$0].host):\(pairs[$0].routerPort)" }
    }

    /// SIGTERM to both processes of pair `index` at once, as `docker-compose stop` does.
    func terminate(_ index: Int) async {
        down.withLock { _ = $0.insert(index) }
        async let router: Bool = pairs[index].router?.terminate() ?? true
        async let engine: Bool = pairs[index].engine?.terminate() ?? true
        _ = await (router, engine)
    }

    /// Pair `index` is up again (started anew by the test).
    func revive(_ index: Int) {
        down.withLock { _ = $0.remove(index) }
    }

    /// Cuts pair `index`'s host off from everything (`network` only): its clients, the other
    /// pairs and PostgreSQL; the test still reaches its engine's control port for samples.
    func cut(_ index: Int) throws {
        try network?.cut(index, open: [pairs[index].enginePort])
    }

    func mend(_ index: Int) throws {
        try network?.mend(index)
    }

    /// Every Router's address (host:port), cut off or not: what a balancer that does not know
    /// sends to.
    var allAddresses: [String] { pairs.map { "\($0.host):\($0.routerPort)" } }

    /// Kills both processes of pair `index`, as a host dying would.
    func kill(_ index: Int) async {
        down.withLock { _ = $0.insert(index) }
        await pairs[index].router?.kill()
        await pairs[index].engine?.kill()
    }

    /// The pair that owns each session, read from PostgreSQL.
    func owners() throws -> [String: String] {
        var owners: [String: String] = [:]
        for line in try postgres.sql("SELECT id, coalesce(owner, '') FROM tonearm_session").split(separator: "\n") {
            let parts = line.split(separator: "|", omittingEmptySubsequences: false)
            if parts.count == 2 { owners[String(parts[0])] = String(parts[1]) }
        }
        return owners
    }

    /// Whether pair `index`'s heartbeats have come steadily for a lease, read from PostgreSQL:
    /// until then placement prefers every steady pair to it (a fresh pair may fail its rounds).
    func steady(_ index: Int) throws -> Bool {
        let answer = try postgres.sql(
            "SELECT coalesce(steady_since <= clock_timestamp() - make_interval(secs => \(lease)), false) FROM tonearm_pair WHERE id = 'pair-\(index)'")
        return answer.trimmingCharacters(in: .whitespacesAndNewlines) == "t"
    }

    /// The sessions each pair's engine is playing now, by pair index: every engine asked at
    /// once, and each play judged at the moment the last answer came. A play held for a
    /// hand-over's moment is not heard yet, one handed over at a moment already past no longer is
    /// (the engines' lists are read a few ms apart, across such a moment).
    func enginePlays() async -> [Int: Set<String>] {
        struct Play: Sendable {
            var id: String
            var state: String
            var startAtMS: Int?
            var handOverAtMS: Int?
        }
        let down = down.withLock { $0 }
        let answers = await withTaskGroup(of: (Int, [Play]?).self) { group in
            for (index, pair) in pairs.enumerated() where !down.contains(index) {
                group.addTask {
                    let sessions = (try? await pair.getJSON(pair.engineURL + "/sessions"))?["sessions"] as? [[String: Any]]
                    return (index, sessions?.map {
                        Play(id: $0["session_id"] as? String ?? "", state: $0["state"] as? String ?? "",
                            startAtMS: $0["start_at_ms"] as? Int, handOverAtMS: $0["handover_at_ms"] as? Int)
                    })
                }
            }
            var answers: [Int: [Play]] = [:]
            for await (index, plays) in group { answers[index] = plays }
            return answers
        }
        let moment = Int(Date().timeIntervalSince1970 * 1_000)
        return answers.mapValues { plays in
            Set(plays.filter {
                ["extracting", "streaming", "paused"].contains($0.state) && $0.startAtMS == nil && ($0.handOverAtMS.map { moment < $0 } ?? true)
            }.map(\.id))
        }
    }

    /// Copies every pair's logs to a folder that outlives the test (for a failure to be read
    /// after it); answers the folder.
    func keepLogs(_ label: String) -> String {
        let folder = "/tmp/tonearm-logs-\(label)-\(Int(Date().timeIntervalSince1970))"
        for (index, pair) in pairs.enumerated() {
            let target = folder + "/pair-\(index)"
            try? FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
            for file in (try? FileManager.default.contentsOfDirectory(atPath: pair.directory.path)) ?? [] where file.hasSuffix(".log") {
                try? FileManager.default.copyItem(atPath: pair.directory.file(file), toPath: target + "/" + file)
            }
        }
        return folder
    }

    func stop() async {
        for pair in pairs { await pair.stop() }
        postgres.stop()
        network?.remove()
    }
}

extension PairCluster {
    /// Plays guild `i` through pair `i % 3` with `tones[i % tones.count]`, and gives each guild a bot
    /// that connects to every Router in turn (`addresses`, in order, starting at its own index)
    /// with the reference bot's connect and silence timeouts.
    func playWithBots(_ guilds: [String], tones: [Int]) async throws -> [BalancedListener] {
        for (index, guild) in guilds.enumerated() {
            let answer = try await pairs[index % pairs.count].play(guild, "tone-\(tones[index % tones.count]).mp3")
            #expect(answer.status == 202, "\(answer.body)")
        }
        let addresses = allAddresses
        return guilds.indices.map { BalancedListener(session: guilds[$0], addresses: { addresses }, start: $0, patience: .init()) }
    }
}
