// The Router's connection to the engine's Unix socket: connects, reconnects with backoff when
// the engine is not up or goes away, and closes and re-opens the link on a protocol error rather
// than guessing where the next message starts.
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import WireProtocol

/// Exponential reconnect delays: 100 ms, 200 ms, … capped at 2 s; reset after a good connection.
struct Backoff: Sendable {
    var initial: Duration = .milliseconds(100)
    var maximum: Duration = .seconds(2)
    private(set) var attempt = 0

    init(initial: Duration = .milliseconds(100), maximum: Duration = .seconds(2)) {
        self.initial = initial
        self.maximum = maximum
    }

    mutating func next() -> Duration {
        defer { attempt += 1 }
        return min(initial * (1 << min(attempt, 16)), maximum)
    }

    mutating func reset() { attempt = 0 }
}

/// Keeps one connection to the engine and routes what arrives into the `SessionStore`.
final class EngineLink: Service, Sendable {
    struct Status: Sendable, Equatable {
        var connected = false
        var connects: UInt64 = 0
        var protocolErrors: UInt64 = 0
        var lastError: String?
    }

    private let path: String
    private let store: SessionStore
    private let group: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(Status())
    /// Runs after every (re)connection, before messages are routed.
    private let onConnect: @Sendable () async -> Void

    init(
        path: String, store: SessionStore, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger, onConnect: @escaping @Sendable () async -> Void = {}
    ) {
        self.onConnect = onConnect
        self.path = path
        self.store = store
        self.group = group
        self.logger = logger
    }

    var status: Status { state.withLock { $0 } }

    func run() async throws {
        try await cancelWhenGracefulShutdown {
            var backoff = Backoff()
            var loggedWaiting = false
            while !Task.isCancelled {
                do {
                    let channel = try await self.connect()
                    backoff.reset()
                    loggedWaiting = false
                    self.state.withLock {
                        $0.connected = true
                        $0.connects += 1
                        $0.lastError = nil
                    }
                    self.logger.info("engine link up", metadata: ["socket": "\(self.path)"])
                    await self.onConnect()
                    try await channel.executeThenClose { inbound, _ in
                        for try await message in inbound { self.store.route(message) }
                    }
                    self.markDown(nil)
                    self.logger.warning("engine link closed by the engine; reconnecting")
                } catch let error as WireProtocolError {
                    self.markDown(error.description, protocolError: true)
                    self.logger.error("protocol error from the engine; reconnecting", metadata: ["error": "\(error)"])
                } catch {
                    if Task.isCancelled { break }
                    self.markDown("\(error)")
                    if !loggedWaiting {
                        self.logger.info("engine not reachable yet; retrying", metadata: ["socket": "\(self.path)"])
                        loggedWaiting = true
                    }
                }
                try? await Task.sleep(for: backoff.next())
            }
        }
    }

    private func connect() async throws -> NIOAsyncChannel<WireMessage, Never> {
        try await ClientBootstrap(group: group)
            .connect(unixDomainSocketPath: path) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(WireMessageDecoder()))
                    return try NIOAsyncChannel<WireMessage, Never>(wrappingChannelSynchronously: channel)
                }
            }
    }

    private func markDown(_ error: String?, protocolError: Bool = false) {
        state.withLock {
            $0.connected = false
            if let error { $0.lastError = error }
            if protocolError { $0.protocolErrors += 1 }
        }
    }
}
