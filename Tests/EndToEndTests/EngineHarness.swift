// Runs the real AudioEngine binary alone, reads its Unix socket like the Router does, and
// serves media over HTTP from a local server that can stall and drop connections on purpose.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import TestSupport
import WireProtocol

@testable import AudioEngine

/// One AudioEngine process and a reader of its socket.
final class EngineHarness: @unchecked Sendable {
    // @unchecked: `engine` is replaced only from the test's own task.
    let directory: TemporaryDirectory
    let media: String
    let socketPath: String
    let port: Int
    private(set) var engine: BinaryProcess?
    let extraEnvironment: [String: String]
    /// Where the control API listens (an address inside a network namespace, for one).
    let host: String
    /// What the engine is started through (`ip netns exec <ns>`), if anything.
    let launcher: [String]

    init(environment: [String: String] = [:], host: String = "127.0.0.1", launcher: [String] = []) throws {
        self.host = host
        self.launcher = launcher
        directory = try TemporaryDirectory(prefix: "tonearm-engine")
        media = directory.file("media")
        try FileManager.default.createDirectory(atPath: media, withIntermediateDirectories: true)
        socketPath = directory.file("engine.sock")
        port = try freePort()
        extraEnvironment = environment
    }

    func start() async throws -> SocketRecorder {
        var environment = [
            "TONEARM_SOCKET": socketPath, "TONEARM_ENGINE_PORT": "\(port)", "TONEARM_MEDIA_DIR": media,
            "TONEARM_ALLOW_PRIVATE_SOURCES": "1", "TONEARM_ENGINE_HOST": host,
        ]
        environment.merge(extraEnvironment) { $1 }
        engine = try BinaryProcess("AudioEngine", environment: environment, logDirectory: directory.path, launcher: launcher)
        guard await eventually(timeout: .seconds(20), { FileManager.default.fileExists(atPath: self.socketPath) }) else {
            throw FixtureError("the engine did not create its socket: \(engine?.log ?? "")")
        }
        return try await SocketRecorder.connect(socketPath)
    }

    func stop() async { await engine?.terminate() }

    var url: String { "http://\(host):\(port)" }

    @discardableResult
    func post(_ path: String, _ json: String? = nil) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: url + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let json { request.body = .bytes(ByteBuffer(string: json)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(40))
        let body = try await response.body.collect(upTo: 1 << 20)
        let object = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any]
        return (Int(response.status.code), object ?? [:])
    }

    func get(_ path: String) async throws -> (status: Int, json: [String: Any]) {
        try await send(HTTPClientRequest(url: url + path))
    }

    @discardableResult
    func delete(_ path: String) async throws -> (status: Int, json: [String: Any]) {
        var request = HTTPClientRequest(url: url + path)
        request.method = .DELETE
        return try await send(request)
    }

    private func send(_ request: HTTPClientRequest) async throws -> (status: Int, json: [String: Any]) {
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(40))
        let body = try await response.body.collect(upTo: 1 << 20)
        let object = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any]
        return (Int(response.status.code), object ?? [:])
    }
}

/// Everything read from the engine's socket, with arrival times.
final class SocketRecorder: Sendable {
    struct Entry: Sendable {
        let at: ContinuousClock.Instant
        let message: WireMessage
    }

    private let entries = Mutex<[Entry]>([])
    private let channel: any Channel

    private init(channel: any Channel) { self.channel = channel }

    /// Connects; with `reading: false` the connection never reads, like a Router that hangs.
    static func connect(_ path: String, reading: Bool = true) async throws -> SocketRecorder {
        let recorder = Box()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.autoRead, value: reading)
            .channelOption(.socketOption(.so_rcvbuf), value: reading ? 1 << 20 : 4_096)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(WireMessageDecoder()))
                    try channel.pipeline.syncOperations.addHandler(Collector(box: recorder))
                }
            }
            .connect(unixDomainSocketPath: path).get()
        let result = SocketRecorder(channel: channel)
        recorder.value.withLock { $0 = result }
        return result
    }

    func record(_ message: WireMessage) {
        let now = ContinuousClock.now
        entries.withLock { $0.append(Entry(at: now, message: message)) }
    }

    func close() { channel.close(promise: nil) }

    /// Whether the connection is still up (the engine did not drop it, nor did it die).
    var isActive: Bool { channel.isActive }
    /// The first error the reader met (a line or packet the Router's decoder would refuse).
    var failure: String? { failureText.withLock { $0 } }
    private let failureText = Mutex<String?>(nil)
    func fail(_ error: any Error) { failureText.withLock { $0 = $0 ?? "\(error)" } }

    var count: Int { entries.withLock { $0.count } }
    var all: [Entry] { entries.withLock { $0 } }

    /// Audio packets of `session` from index `start` on.
    func packets(_ session: String, from start: Int = 0) -> [(at: ContinuousClock.Instant, data: [UInt8])] {
        let all = self.all
        guard start < all.count else { return [] }
        return all[start...].compactMap { entry in
            guard case .audio(let packet) = entry.message, packet.sessionID.description == session else { return nil }
            return (entry.at, Array(packet.payload.readableBytesView))
        }
    }

    /// Events of `session` from index `start` on.
    func events(_ session: String, from start: Int = 0) -> [(at: ContinuousClock.Instant, event: WireEvent)] {
        let all = self.all
        guard start < all.count else { return [] }
        return all[start...].compactMap { entry in
            guard case .event(let event, _) = entry.message, event.sessionID.description == session else { return nil }
            return (entry.at, event)
        }
    }

    func firstEvent(_ session: String, _ type: EventType, from start: Int = 0) -> (at: ContinuousClock.Instant, event: WireEvent)? {
        events(session, from: start).first { $0.event.type == type }
    }

    final class Box: Sendable {
        let value = Mutex<SocketRecorder?>(nil)
    }

    final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = WireMessage
        let box: Box
        init(box: Box) { self.box = box }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let message = unwrapInboundIn(data)
            box.value.withLock { $0 }?.record(message)
        }
        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            box.value.withLock { $0 }?.fail(error)
            context.close(promise: nil)
        }
    }
}

/// A Python script of `Tests/Fixtures` that prints one line when it is ready, killed with the test.
final class FixtureProcess: @unchecked Sendable {
    // @unchecked: Process is only started and killed.
    private let process: Process
    /// The line it printed when ready.
    let readyLine: String

    /// `launcher` runs it through another command (`ip netns exec <ns>`).
    init(script name: String, arguments: [String], launcher: [String] = []) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/\(name)").path
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = launcher + ["python3", script] + arguments
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line.append(byte)
        }
        readyLine = String(decoding: line, as: UTF8.self)
    }

    /// SIGKILL: it holds no state worth a graceful exit, and it may have been started with
    /// SIGTERM blocked by the thread that spawned it.
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        while process.isRunning { usleep(10_000) }
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}

/// The Python media server of `Tests/Fixtures`, on a free port.
final class MediaServer: Sendable {
    let port: Int
    let address: String
    private let process: FixtureProcess

    /// `launcher` runs it through another command (`ip netns exec <ns>`).
    init(root: String, address: String = "127.0.0.1", arguments: [String] = [], launcher: [String] = []) throws {
        self.address = address
        process = try FixtureProcess(
            script: "media_server.py", arguments: ["--root", root, "--bind", address] + arguments, launcher: launcher)
        guard let port = Int(process.readyLine) else { throw FixtureError("media server did not start") }
        self.port = port
    }

    func url(_ name: String) -> String { "http://\(address):\(port)/\(name)" }

    /// The paths it was asked for so far, one line each (with the Range header or `redirected`).
    func requests() async throws -> [String] {
        try await HTTPClientText.get(url("requests")).split(separator: "\n").map(String.init)
    }

    /// How many responses it is sending right now (a dribbled one counts until its client leaves).
    func openResponses() async throws -> Int {
        Int(try await HTTPClientText.get(url("open"))) ?? -1
    }

    func stop() { process.stop() }
}

/// Test signals and how to read them back.
enum Signal {
    /// A tone whose frequency steps every second: 400 + 40·k Hz in second k.
    static func stepFrequency(second: Int) -> Double { 400 + 40 * Double(second) }

    static func steps(seconds: Int, into directory: String, name: String, extra: [String] = []) throws -> String {
        let file = directory + "/" + name
        let wave = "0.5*sin(2*PI*(400+40*floor(t))*t)"
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=44100:d=\(seconds)"] + extra + [file])
        return file
    }

    /// The frequency heard in each whole second of `packets` (frames 10…40 of each second).
    static func secondsHeard(_ packets: [[UInt8]]) throws -> [Double] {
        let left = try decodeLeft(packets)
        var result: [Double] = []
        var second = 0
        while (second + 1) * 48_000 <= left.count {
            let window = Array(left[(second * 48_000 + 9_600)..<(second * 48_000 + 38_400)])
            result.append(Spectrum.dominantFrequency(window))
            second += 1
        }
        return result
    }

    /// The level in dBFS of each packet, decoded in sequence.
    static func levels(_ packets: [[UInt8]]) throws -> [Double] {
        let decoder = try OpusDecoder()
        return try packets.map { Spectrum.dBFS(Spectrum.left(try decoder.decode($0))) }
    }
}
