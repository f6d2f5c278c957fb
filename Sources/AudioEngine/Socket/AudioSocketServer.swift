// The Unix socket the Router reads from. Any number of Router connections; each receives every
// tick's batch through its own bounded queue (`RouterConnection`). A connection that cannot keep
// up loses the audio of its own oldest ticks (events still go through, in order), and never slows
// the pacer or another connection.
import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// Listens on the engine's Unix socket and writes each pacer tick to every connection.
final class AudioSocketServer: Service, Sendable {
    struct Counters: Sendable, Equatable {
        var connections = 0
        /// Audio frames not written to a connection because its buffer was full.
        var droppedFrames: UInt64 = 0
        /// Connections accepted since the engine started.
        var accepted = 0
    }

    /// Bytes the socket layer may hold for a connection before it counts as full and ticks wait
    /// in the connection's own queue (about 250 ms of 60 sessions at 128 kbit/s).
    static let highWatermark = 256 * 1024
    static let lowWatermark = 128 * 1024

    private let path: String
    private let group: any EventLoopGroup
    private let logger: Logger
    private let connections = Mutex<[ObjectIdentifier: RouterConnection]>([:])
    private let counters = Mutex(Counters())
    private let bound = Mutex<(any Channel)?>(nil)

    private let metrics: EngineMetrics

    init(
        path: String, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        metrics: EngineMetrics = EngineMetrics(), logger: Logger
    ) {
        self.metrics = metrics
        self.path = path
        self.group = group
        self.logger = logger
    }

    var stats: Counters {
        var value = counters.withLock { $0 }
        value.connections = connections.withLock { $0.count }
        return value
    }

    /// Binds the socket; `run()` calls it, tests may call it directly.
    func bind() async throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 64)
            .childChannelOption(
                .writeBufferWaterMark, value: .init(low: Self.lowWatermark, high: Self.highWatermark)
            )
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let connection = RouterConnection(channel: channel)
                    try channel.pipeline.syncOperations.addHandler(WritabilityHandler(connection: connection))
                    accept(connection)
                }
            }
            .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
            .get()
        bound.withLock { $0 = channel }
        logger.info("listening for the Router", metadata: ["socket": "\(path)"])
    }

    func run() async throws {
        try await bind()
        try? await gracefulShutdown()
        await close()
    }

    /// Flushes what is queued to each connection, closes them and removes the socket file.
    func close() async {
        let server = bound.withLock { channel in
            defer { channel = nil }
            return channel
        }
        try? await server?.close()
        let open = connections.withLock { Array($0.values) }
        for connection in open {
            let channel = connection.channel
            // Whatever the connection still has queued goes out first; writes complete in order.
            try? await channel.eventLoop.submit { connection.drain() }.get()
            try? await channel.writeAndFlush(channel.allocator.buffer(capacity: 0)).get()
            try? await channel.close()
        }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Hands one tick to every connection without waiting for any of them.
    func write(_ batch: TickBatch) {
        let open = connections.withLock { Array($0.values) }
        var dropped: UInt64 = 0
        for connection in open {
            dropped += UInt64(connection.enqueue(batch))
        }
        if dropped > 0 {
            counters.withLock { $0.droppedFrames += dropped }
            metrics.droppedFrames.increment(by: Int64(dropped))
        }
    }

    private func accept(_ connection: RouterConnection) {
        let channel = connection.channel
        let key = ObjectIdentifier(channel)
        connections.withLock { $0[key] = connection }
        counters.withLock { $0.accepted += 1 }
        logger.info("Router connected")
        channel.closeFuture.whenComplete { [self] _ in
            connections.withLock { _ = $0.removeValue(forKey: key) }
            logger.info("Router disconnected")
        }
    }
}
