// The AudioEngine executable: reads configuration, builds the services and runs them until
// SIGTERM or SIGINT.
import ArgumentParser
import Foundation
import Hummingbird
import Logging
import NIOPosix
import ServiceLifecycle
import UnixSignals

@main
struct AudioEngineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "AudioEngine",
        abstract: "Decodes sources, encodes Opus and paces frames for every session onto a Unix socket.",
        discussion: "Every option can also be set with the TONEARM_* environment variable named in its help.")

    @Option(help: "Unix socket the Router connects to (TONEARM_SOCKET, default /tmp/tonearm/engine.sock).")
    var socket: String?
    @Option(help: "Port of the HTTP control API on 127.0.0.1 (TONEARM_ENGINE_PORT, default 8180).")
    var port: Int?
    @Option(help: "Directory whose files may be played (TONEARM_MEDIA_DIR, default ./media).")
    var mediaDir: String?
    @Flag(help: "Allow http(s) sources on private and loopback addresses (TONEARM_ALLOW_PRIVATE_SOURCES).")
    var allowPrivateSources = false

    func run() async throws {
        var configuration = try EngineConfiguration(environment: ProcessInfo.processInfo.environment)
        if let socket { configuration.socketPath = socket }
        if let port { configuration.controlPort = port }
        if let mediaDir { configuration.mediaDirectory = mediaDir }
        if allowPrivateSources { configuration.allowPrivateSources = true }
        var logger = Logger(label: "tonearm.engine")
        logger.logLevel = .info
        try await AudioEngineService.run(configuration: configuration, logger: logger)
    }
}

/// Wires the engine's parts together; the tests use it to run an engine in-process.
enum AudioEngineService {
    static func run(configuration: EngineConfiguration, logger: Logger) async throws {
        let workers = NIOThreadPool(numberOfThreads: configuration.workerThreads)
        workers.start()
        let openers = NIOThreadPool(numberOfThreads: configuration.openerThreads)
        openers.start()
        let resolver = SourceResolver(
            library: MediaLibrary(directory: configuration.mediaDirectory),
            policy: NetworkPolicy(allowPrivateSources: configuration.allowPrivateSources),
            ytdlp: YTDLP(executable: configuration.ytdlpPath))
        let metrics = EngineMetrics.prometheus()
        let manager = SessionManager(
            resolver: resolver, configuration: configuration.playback, workers: workers, openers: openers,
            metrics: metrics, logger: logger)
        let socket = AudioSocketServer(path: configuration.socketPath, metrics: metrics, logger: logger)
        let pacer = Pacer(manager: manager, sink: socket, logger: logger)
        let router = Router()
        ControlAPI(manager: manager, socket: socket, resolver: resolver, searchPrefix: configuration.searchPrefix)
            .addRoutes(to: router)
        let app = Application(
            router: router,
            configuration: .init(
                address: .hostname(configuration.controlHost, port: configuration.controlPort),
                serverName: "tonearm-engine"),
            logger: logger)
        // Shut down in reverse: the API stops taking requests, the pacer writes the last
        // `finished` events, then the socket flushes and closes.
        let group = ServiceGroup(
            configuration: .init(
                services: [.init(service: socket), .init(service: pacer), .init(service: app)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch {
            try? await workers.shutdownGracefully()
            try? await openers.shutdownGracefully()
            throw error
        }
        try? await workers.shutdownGracefully()
        try? await openers.shutdownGracefully()
    }
}
