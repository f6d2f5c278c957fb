// The engine's services wired together: the executable and the tests run them through here.
import Foundation
import Hummingbird
import Logging
import NIOPosix
import ServiceSupport
import ServiceLifecycle
import UnixSignals

/// Wires the engine's parts together; the tests use it to run an engine in-process.
package enum AudioEngineService {
    package static func run(configuration: EngineConfiguration, logger: Logger) async throws {
        let workers = NIOThreadPool(numberOfThreads: configuration.workerThreads)
        workers.start()
        let openers = NIOThreadPool(numberOfThreads: configuration.openerThreads)
        openers.start()
        let network = try SourceNetwork(
            policy: configuration.sourcePolicy, extraAuthorities: configuration.sourceAuthorities,
            openTimeout: .nanoseconds(Int64(configuration.resolveTimeout.components.seconds) * 1_000_000_000))
        // yt-dlp's own requests go through the engine, under the same policy as its fetches.
        let proxy = try await PolicyProxy.start(network: network, logger: logger)
        let resolver = SourceResolver(
            library: MediaLibrary(directory: configuration.mediaDirectory),
            network: network,
            ytdlp: YTDLP(
                executable: configuration.ytdlpPath, timeout: configuration.resolveTimeout, limits: configuration.resolveLimits,
                proxy: proxy.url),
            openLimits: .init(
                limit: configuration.resolveLimits.limit * 4, queueLimit: configuration.resolveLimits.queueLimit * 2))
        let metrics = EngineMetrics.prometheus()
        let background = BackgroundTasks()
        let manager = SessionManager(
            resolver: resolver, configuration: configuration.playback, workers: workers, openers: openers,
            background: background, metrics: metrics, load: configuration.loadSettings(), logger: logger)
        // The Router socket's own event loop: the pacer hands it each tick's batch, so it runs at
        // the pacer's priority, and nothing else (HTTP requests) queues in front of the write.
        let socketLoop = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        try await socketLoop.next().submit {
            ThreadPriority.prioritize("tonearm-socket", priority: configuration.pacerRealtimePriority, logger: logger)
        }.get()
        let socket = AudioSocketServer(path: configuration.socketPath, group: socketLoop, metrics: metrics, logger: logger)
        let pacer = Pacer(
            manager: manager, sink: socket, realtimePriority: configuration.pacerRealtimePriority, logger: logger)
        let router = Router(context: EngineRequestContext.self)
        ControlAPI(manager: manager, socket: socket, resolver: resolver, searchPrefix: configuration.searchPrefix)
            .addRoutes(to: router)
        let app = Application(
            router: router,
            configuration: .init(
                address: .hostname(configuration.controlHost, port: configuration.controlPort),
                serverName: "tonearm-engine"),
            logger: logger)
        // Shut down in reverse: the API stops taking requests, resolves still running are
        // cancelled (their yt-dlp killed), the pacer writes the last `finished` events, then the
        // socket flushes and closes.
        let group = ServiceGroup(
            configuration: .init(
                services: [
                    .init(service: socket), .init(service: pacer), .init(service: background), .init(service: app),
                    .init(service: HandOverGrace(manager: manager, grace: configuration.handOverGrace)),
                    .init(
                        service: LoadMonitor(
                            manager: manager, control: manager.load, routerConnections: { socket.stats.accepted }, logger: logger)),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        do {
            try await group.run()
        } catch {
            await proxy.close()
            try? await workers.shutdownGracefully()
            try? await openers.shutdownGracefully()
            try? await socketLoop.shutdownGracefully()
            throw error
        }
        await proxy.close()
        try? await workers.shutdownGracefully()
        try? await openers.shutdownGracefully()
        try? await socketLoop.shutdownGracefully()
    }
}
