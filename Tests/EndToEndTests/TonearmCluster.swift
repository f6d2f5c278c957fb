// Runs the real AudioEngine and Router binaries for a test: a temporary socket under /tmp,
// free ports, generated media, and small HTTP and WebSocket clients to drive them.
import AsyncHTTPClient
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization
import TestSupport

/// One engine + Router pair started from the built executables.
final class TonearmCluster: @unchecked Sendable {
    // @unchecked: the process handles are replaced only by the test's own task (restart).
    let directory: TemporaryDirectory
    let mediaDirectory: String
    let socketPath: String
    let enginePort: Int
    let routerPort: Int
    private(set) var engine: BinaryProcess?
    private(set) var router: BinaryProcess?
    /// Settings on top of the defaults below, for both processes.
    let extraEnvironment: [String: String]
    /// With `tls`: the Router serves HTTPS with a certificate from this test's own authority.
    let certificates: TestCertificates?
    /// Trusts `certificates`' authority when there is one.
    let client: HTTPClient
    /// What the Router is started through (`setpriv …`), if anything.
    var routerLauncher: [String] = []
    /// What the engine is started through (`ip netns exec …`), if anything.
    var engineLauncher: [String] = []
    /// The address both processes listen on (a network namespace's own, for a cluster test).
    let host: String

    init(
        tones: [Int] = [440, 880, 660], seconds: Double = 30, environment: [String: String] = [:], tls: Bool = false,
        routerPort: Int? = nil, host: String = "127.0.0.1"
    ) throws {
        self.host = host
        directory = try TemporaryDirectory(prefix: "tonearm-e2e")
        if tls {
            let certificates = try TestCertificates(in: directory.path)
            self.certificates = certificates
            extraEnvironment = environment.merging(
                ["TONEARM_TLS_CERT": certificates.certificate, "TONEARM_TLS_KEY": certificates.key]) { mine, _ in mine }
            var trust = TLSConfiguration.makeClientConfiguration()
            trust.trustRoots = .file(certificates.authority)
            client = HTTPClient(configuration: .init(tlsConfiguration: trust))
        } else {
            certificates = nil
            extraEnvironment = environment
            client = HTTPClient.shared
        }
        mediaDirectory = directory.file("media")
        try FileManager.default.createDirectory(atPath: mediaDirectory, withIntermediateDirectories: true)
        for tone in tones { try MediaFixture.tone(tone, seconds: seconds, into: mediaDirectory) }
        socketPath = directory.file("engine.sock")
        enginePort = try freePort()
        self.routerPort = try routerPort ?? freePort()
    }

    var environment: [String: String] {
        [
            "TONEARM_SOCKET": socketPath, "TONEARM_ENGINE_PORT": "\(enginePort)", "TONEARM_MEDIA_DIR": mediaDirectory,
            "TONEARM_ROUTER_HOST": host, "TONEARM_ROUTER_PORT": "\(routerPort)", "TONEARM_ENGINE_HOST": host,
            "TONEARM_ENGINE_URL": "http://\(host):\(enginePort)", "TONEARM_DATA_DIR": directory.file("data"),
            "TONEARM_BOT_TOKEN": Self.botToken,
        ].merging(extraEnvironment) { _, extra in extra }
    }

    func startEngine() throws {
        engine = try BinaryProcess("AudioEngine", environment: environment, logDirectory: directory.path, launcher: engineLauncher)
    }

    func startRouter() throws {
        router = try BinaryProcess("Router", environment: environment, logDirectory: directory.path, launcher: routerLauncher)
    }

    func stop() async {
        await router?.terminate()
        await engine?.terminate()
        if certificates != nil { try? await client.shutdown() }
    }

    /// The bot token the tests use to reach any session.
    static let botToken = "test-bot-token"

    var routerURL: String { "\(certificates == nil ? "http" : "https")://\(host):\(routerPort)" }
    var engineURL: String { "http://\(host):\(enginePort)" }

    /// POSTs JSON (with the bot token unless another `token` is given) and returns the status and body.
    func post(_ url: String, _ json: String? = nil, token: String? = TonearmCluster.botToken) async throws -> (
        status: Int, body: String
    ) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        if let json { request.body = .bytes(ByteBuffer(string: json)) }
        let response = try await client.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), String(buffer: body))
    }

    func getJSON(_ url: String, token: String? = nil) async throws -> [String: Any]? {
        var request = HTTPClientRequest(url: url)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        let response = try await client.execute(request, timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 1 << 20)
        return try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]
    }

    /// The last lines of each process's log and whether it still runs, for a failure's message.
    func logTails(lines: Int = 15) -> String {
        [engine, router].compactMap { $0 }.map { process in
            let text = (try? String(contentsOfFile: process.logPath, encoding: .utf8)) ?? ""
            let state = process.isRunning ? "running" : "exited with \(process.exitCode)"
            return "\(process.name) (\(state)), the end of its log:\n" + text.split(separator: "\n").suffix(lines).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    /// Whether the Router reports its engine link up.
    func routerLinkUp() async -> Bool {
        guard let health = try? await getJSON(routerURL + "/health"),
            let engine = health["engine"] as? [String: Any]
        else { return false }
        return engine["connected"] as? Bool == true
    }

    /// Whether the pair's Router renews its leases (its `/health`'s `cluster.ok`): until its
    /// first round it places every new session on another pair.
    func clusterReady() async -> Bool {
        let health = try? await getJSON(routerURL + "/health")
        return (health?["cluster"] as? [String: Any])?["ok"] as? Bool == true
    }

    func play(_ session: String, _ url: String, token: String? = TonearmCluster.botToken) async throws -> (
        status: Int, body: String
    ) {
        try await post(routerURL + "/api/sessions/\(session)/play", #"{"url":"\#(url)"}"#, token: token)
    }

    func stopSession(_ session: String) async throws -> (status: Int, body: String) {
        try await post(routerURL + "/api/sessions/\(session)/stop")
    }
}

/// A WebSocket listener on one session that records everything it receives, with arrival times.
final class SessionListener: Sendable {
    enum Message: Sendable {
        case audio([UInt8])
        case text(String)
    }
    struct Received: Sendable {
        let at: ContinuousClock.Instant
        let message: Message
    }

    let session: String
    private let received = Mutex<[Received]>([])
    private let outbound = Mutex<WebSocketOutboundWriter?>(nil)
    private let connected = Atomic<Bool>(false)
    private let ended = Atomic<Bool>(false)
    private let task = Mutex<Task<Void, Never>?>(nil)
    private let audioMessageCount = Atomic<Int>(0)

    /// Listens to `session` with the bot token, or with a browser `token` (which names its session);
    /// `bot` connects the way a bot does, at `/bot?guild=`. With `frames` (2 to 10), each binary
    /// message holds that many packets, each kept here as one (`audioMessages` counts messages).
    init(session: String, routerPort: Int, token: String? = nil, bot: Bool = false, frames: Int = 1) {
        self.session = session
        let base =
            bot
            ? "ws://127.0.0.1:\(routerPort)/bot?guild=\(session)&token=\(TonearmCluster.botToken)"
            : token.map { "ws://127.0.0.1:\(routerPort)/ws?token=\($0)" }
                ?? "ws://127.0.0.1:\(routerPort)/ws?session=\(session)&token=\(TonearmCluster.botToken)"
        let url = frames == 1 ? base : base + "&frames=\(frames)"
        let handle = Task { [self] in
            _ = try? await WebSocketClient.connect(url: url, logger: Logger(label: "listener")) { inbound, outbound, _ in
                self.outbound.withLock { $0 = outbound }
                self.connected.store(true, ordering: .relaxed)
                for try await message in inbound.messages(maxSize: 1 << 16) {
                    let now = ContinuousClock.now
                    switch message {
                    case .binary(var buffer) where frames > 1:
                        var packets: [Received] = []
                        while let length = buffer.readInteger(as: UInt16.self), let packet = buffer.readBytes(length: Int(length)) {
                            packets.append(Received(at: now, message: .audio(packet)))
                        }
                        self.audioMessageCount.wrappingAdd(1, ordering: .relaxed)
                        self.received.withLock { $0 += packets }
                    case .binary(let buffer):
                        self.audioMessageCount.wrappingAdd(1, ordering: .relaxed)
                        self.received.withLock { $0.append(Received(at: now, message: .audio(Array(buffer.readableBytesView)))) }
                    case .text(let text):
                        self.received.withLock { $0.append(Received(at: now, message: .text(text))) }
                    }
                }
            }
            self.connected.store(false, ordering: .relaxed)
            self.ended.store(true, ordering: .relaxed)
        }
        task.withLock { $0 = handle }
    }

    var isConnected: Bool { connected.load(ordering: .relaxed) }
    /// Binary messages received (with `frames`, each holds several packets).
    var audioMessages: Int { audioMessageCount.load(ordering: .relaxed) }
    /// The connection is over: closed, refused, or never made.
    var hasEnded: Bool { ended.load(ordering: .relaxed) }
    var all: [Received] { received.withLock { $0 } }
    var count: Int { received.withLock { $0.count } }

    func close() { task.withLock { $0?.cancel() } }

    /// Sends a text message (a command) to the Router.
    func send(_ text: String) async throws {
        guard let outbound = outbound.withLock({ $0 }) else { throw FixtureError("not connected") }
        try await outbound.write(.text(text))
    }

    /// The `reply` to the command sent with `id`, once it has arrived.
    func reply(_ id: Int, timeout: Duration = .seconds(10)) async -> [String: Any]? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let reply = texts().first(where: { $0["type"] as? String == "reply" && ($0["id"] as? Int) == id }) {
                return reply
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    /// Audio packets received after index `from` of `all`.
    func audio(from start: Int = 0) -> [(at: ContinuousClock.Instant, packet: [UInt8])] {
        all[start...].compactMap { if case .audio(let p) = $0.message { ($0.at, p) } else { nil } }
    }

    /// Events (as JSON objects) received after index `from`.
    /// The engine's events (text messages other than the Router's `state` and `reply`).
    func events(from start: Int = 0) -> [[String: Any]] {
        texts(from: start).filter { !["state", "reply"].contains($0["type"] as? String) }
    }

    /// The Router's `state` messages.
    func states(from start: Int = 0) -> [[String: Any]] {
        texts(from: start).filter { $0["type"] as? String == "state" }
    }

    func texts(from start: Int = 0) -> [[String: Any]] {
        all[start...].compactMap {
            guard case .text(let text) = $0.message else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
        }
    }
}
