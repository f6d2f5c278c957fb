// A Lavalink session's messages from the other pairs of a cluster, brought to its home: the
// Router that has its client's WebSocket. While the client is connected, the home keeps a feed
// (`/v4/cluster/feed`) to every pair the database names as running one of the session's players,
// looked up twice a second, and passes on what each sends (events, `playerUpdate`; each pair's
// `stats` are its own and stay out). At the other end the feed takes that pair's session of the
// same id over as the client's socket would: what it queued meanwhile comes first. When the
// session ends with its client's socket (no resuming), each feed is told so before it closes.
import Foundation
import HTTPTypes
import HummingbirdWebSocket
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOWebSocket
import Synchronization

final class LavalinkFeeds: Sendable {
    private let session: LavalinkSession
    private let cluster: LavalinkCluster
    private struct State {
        /// Each open feed's stop: `true` tells its pair the session has ended.
        var open: [String: AsyncStream<Bool>.Continuation] = [:]
        /// Set by `stop`: whether the session ended.
        var stopped: Bool?
    }
    private let state = Mutex(State())

    static let lookEvery: Duration = .milliseconds(500)
    static let end = #"{"op":"end"}"#

    init(session: LavalinkSession, cluster: LavalinkCluster) {
        self.session = session
        self.cluster = cluster
    }

    /// Keeps the feeds the database asks for until `stop`, then until each has closed.
    func run() async {
        await withDiscardingTaskGroup { group in
            while state.withLock({ $0.stopped == nil }) {
                if let places = try? await cluster.database.lavalinkPlayerPlaces(of: session.id) {
                    let wanted = Set(places.compactMap { $0.pair == cluster.pairID ? nil : $0.address })
                    let unwanted = state.withLock { state in state.open.filter { !wanted.contains($0.key) }.map(\.value) }
                    for stop in unwanted { stop.yield(false) }
                    for address in wanted {
                        let (stops, stop) = AsyncStream<Bool>.makeStream()
                        let isNew = state.withLock { state in
                            guard state.stopped == nil, state.open[address] == nil else { return false }
                            state.open[address] = stop
                            return true
                        }
                        guard isNew else { continue }
                        group.addTask {
                            await self.feed(from: address, stops: stops)
                            _ = self.state.withLock { $0.open.removeValue(forKey: address) }
                        }
                    }
                }
                try? await Task.sleep(for: Self.lookEvery)
            }
        }
    }

    /// Closes every feed (the client's socket closed); `ended`: the session is over, and each
    /// pair ends its part at once.
    func stop(ended: Bool) {
        let open = state.withLock { state in
            state.stopped = ended
            return Array(state.open.values)
        }
        for stop in open { stop.yield(ended) }
    }

    private func feed(from address: String, stops: AsyncStream<Bool>) async {
        let url = address.replacingOccurrences(of: "http", with: "ws", options: .anchored) + "/v4/cluster/feed?session=\(session.id)"
        var headers = HTTPFields()
        headers[.authorization] = cluster.password
        headers[ClusterRelay.forwardedHeader] = cluster.pairID
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 16, additionalHeaders: headers, closeTimeout: .seconds(1))
        let session = session
        do {
            _ = try await WebSocketClient.connect(url: url, configuration: configuration, logger: cluster.logger) { inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { tasks in
                    tasks.addTask {
                        for try await message in inbound.messages(maxSize: 1 << 20) {
                            guard case .text(let text) = message, !text.contains(#""op":"stats""#) else { continue }
                            session.send(text)
                        }
                    }
                    tasks.addTask {
                        var stops = stops.makeAsyncIterator()
                        if await stops.next() == true { try await outbound.write(.text(Self.end)) }
                    }
                    try await tasks.next()
                    tasks.cancelAll()
                }
            }
        } catch {
            cluster.logger.debug("lavalink feed ended", metadata: ["lavalink.session": "\(session.id)", "from": "\(address)", "error": "\(error)"])
        }
    }

    /// The other end: a home's feed takes this pair's session of its id over, until it closes or
    /// says the session has ended.
    static func serve(node: LavalinkNode, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, id: String) async throws {
        guard let session = try? await node.session(id) else {
            try await outbound.close(.init(codeNumber: 4404), reason: "no such session")
            return
        }
        let (messages, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(4_096))
        let generation = session.attach(continuation, resumed: false, home: false)
        let ended = NIOLockedValueBox(false)
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await message in messages { try await outbound.write(.text(message)) }
                }
                group.addTask {
                    for try await message in inbound.messages(maxSize: 1 << 16) {
                        if case .text(let text) = message, text == Self.end { ended.withLockedValue { $0 = true } }
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        } catch {
            node.logger.debug("lavalink feed closed", metadata: ["lavalink.session": "\(id)", "error": "\(error)"])
        }
        continuation.finish()
        let over = ended.withLockedValue { $0 }
        Task { await node.closed(session, generation: generation, ended: over) }
    }
}
