// A Lavalink client's WebSocket (`/v4/websocket`): `User-Id` names the bot, `Session-Id` the
// session to resume. The socket carries the node's messages to the client (`ready` first, then
// what was queued while it was away, `stats`, `playerUpdate` and events); Lavalink v4 clients
// send nothing on it, and anything they send is read and dropped.
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import ServiceLifecycle

struct LavalinkSocket {
    let node: LavalinkNode

    static let userID = HTTPField.Name("User-Id")!
    static let sessionID = HTTPField.Name("Session-Id")!
    static let clientName = HTTPField.Name("Client-Name")!

    func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, request: Request, channel: any Channel) async throws {
        guard let userID = request.headers[Self.userID], !userID.isEmpty, userID.utf8.count <= 20,
            userID.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
        else {
            try await outbound.close(.init(codeNumber: 4400), reason: "User-Id must be the bot's Discord user id")
            return
        }
        let (session, resumed) = await node.open(userID: userID, resume: request.headers[Self.sessionID])
        node.logger.info(
            resumed ? "lavalink session resumed" : "lavalink session opened",
            metadata: [
                "lavalink.session": "\(session.id)", "lavalink.client": "\(request.headers[Self.clientName] ?? "")",
                "lavalink.asked": "\(request.headers[Self.sessionID] ?? "")",
            ])
        let (messages, continuation) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(4_096))
        let generation = session.attach(continuation, resumed: resumed)
        let socket = node.sockets.withLockedValue { sockets in
            defer { sockets.last += 1 }
            sockets.open[sockets.last] = channel
            return sockets.last
        }
        defer { _ = node.sockets.withLockedValue { $0.open.removeValue(forKey: socket) } }
        // In a cluster, the messages of its players at other pairs come here while it is open.
        let feeds = node.cluster.map { LavalinkFeeds(session: session, cluster: $0) }
        if let feeds { Task { await feeds.run() } }
        var usage = ProcessUsage()
        var stats = await node.stats(usage: &usage)
        stats["op"] = "stats"
        session.send(LavalinkJSON.text(stats))
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await message in messages { try await outbound.write(.text(message)) }
                }
                group.addTask {
                    for try await _ in inbound {}
                }
                try await group.next()
                group.cancelAll()
            }
        } catch {
            node.logger.debug("lavalink socket ended", metadata: ["session": "\(session.id)", "error": "\(error)"])
        }
        continuation.finish()
        if let feeds {
            let kept = (try? await node.cluster?.database.lavalinkSession(session.id))??.resuming ?? session.resuming
            feeds.stop(ended: !kept)
        }
        // The session outlives its socket for the resume timeout: waited for apart from this handler.
        Task { [node] in await node.closed(session, generation: generation) }
    }
}

/// Sends the Lavalink clients their periodic messages (`LavalinkNode.run`) and in a cluster writes
/// the players' rows, until the Router stops; then cuts the clients' connections, so that each
/// client resumes its session at another Router (or at this one once it is back).
struct LavalinkService: Service {
    let node: LavalinkNode

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await node.run() }
                if let cluster = node.cluster { group.addTask { await cluster.runWrites() } }
            }
        }
        // Before the server closes them with a close frame: a lost connection is what every
        // client library resumes from (wavelink 3.5.2 does not reconnect after a close frame).
        for channel in node.sockets.withLockedValue({ Array($0.open.values) }) { channel.close(promise: nil) }
    }
}
