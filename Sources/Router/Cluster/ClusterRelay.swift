// Any Router serves any client: a request for a session another pair owns is carried to that
// pair's Router and its answer back — REST and `/listen` forwarded as they came, a WebSocket
// client (`/ws`, `/bot`) relayed over the upstream WebSocket this Router keeps to the owner for
// that session (one per session, path and frames per message, shared by its clients:
// SharedUpstream).
//
// A relayed client stays connected while its session moves: when the owner changes (the old one
// died, was cut off, or drained) the upstream connects to the new owner, whose state message
// comes first, and the audio goes on. A client's command sent while no upstream is connected is
// answered with a `cluster_unavailable` reply. Forwarded requests carry `X-Tonearm-Forwarded`,
// and a Router never forwards such a request again (no loops while ownership changes).
import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import HummingbirdWSClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOWebSocket
import ServiceLifecycle
import ServiceSupport
import Synchronization
import WireProtocol

struct ClusterRelay: Sendable {
    let member: ClusterMember
    let http: HTTPClient
    let logger: Logger
    /// The upstreams of the clients relayed now, moved when the Router stops.
    var clients = RelayedClients()
    /// The clients relayed now, by session, path and frames per message: one upstream each.
    let upstreams = RelayUpstreams()

    static let forwardedHeader = HTTPField.Name("X-Tonearm-Forwarded")!

    // MARK: Placement for clients

    /// Where a client's session plays, waiting (up to `patience`) while the session moves: its
    /// owner stopped answering and its lease has not run out yet.
    func placeWaiting(_ id: SessionID, patience: Duration? = nil) async throws(APIError) -> Placement {
        let deadline = ContinuousClock.now + (patience ?? member.settings.lease * 2)
        while true {
            do {
                return try await member.place(id)
            } catch {
                guard error.code == "cluster_unavailable", ContinuousClock.now < deadline else { throw error }
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    // MARK: REST and /listen

    /// Forwards `request` to the Router at `address` and streams its answer back.
    func forward(_ request: Request, to address: String) async throws -> Response {
        var upstream = HTTPClientRequest(url: address + request.uri.description)
        upstream.method = .init(rawValue: request.method.rawValue)
        for field in request.headers where ![.connection, .contentLength, .transferEncoding].contains(field.name) {
            upstream.headers.add(name: field.name.rawName, value: field.value)
        }
        upstream.headers.add(name: Self.forwardedHeader.rawName, value: member.settings.pairID)
        var request = request
        let body = try await request.collectBody(upTo: 64 * 1024)
        if body.readableBytes > 0 { upstream.body = .bytes(body) }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(upstream, deadline: .now() + .seconds(30))
        } catch {
            throw APIError(
                status: .serviceUnavailable, code: "cluster_unavailable",
                message: "the pair that plays this session does not answer; it moves within seconds", retryAfterSeconds: 1)
        }
        var headers = HTTPFields()
        for (name, value) in response.headers {
            guard let field = HTTPField.Name(name), ![.connection, .contentLength, .transferEncoding].contains(field) else { continue }
            headers.append(HTTPField(name: field, value: value))
        }
        return Response(
            status: .init(code: Int(response.status.code)), headers: headers,
            body: ResponseBody { writer in
                for try await chunk in response.body { try await writer.write(chunk) }
                try await writer.finish(nil)
            })
    }

    // MARK: WebSockets

    /// Relays a WebSocket client of session `id` to its owner over the upstream this Router
    /// shares among that session's clients (`SharedUpstream`), which follows the session from pair
    /// to pair, until the client leaves or the session comes to this pair (then the client is
    /// told to connect again, with 4012, and is served here). When this Router stops, the client
    /// is moved as a hand-over moves one (`leave`): nothing it was to hear is skipped.
    func relay(
        _ id: SessionID, first address: String, request: Request, inbound: WebSocketInboundStream,
        outbound: WebSocketOutboundWriter
    ) async throws {
        let frames = (try? ClientConnections.framesPerMessage(request)) ?? 1
        let key = SharedUpstream.Key(session: id, path: request.uri.path, frames: frames)
        let (group, member, output) = upstreams.join(key, request: request) { group in
            Task { await follow(group, first: address) }
        }
        defer { upstreams.leave(member, of: group) }
        await group.requestJoin(member)
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                // The client's commands go up while an upstream is connected.
                tasks.addTask {
                    for try await message in inbound.messages(maxSize: 64 * 1024) {
                        guard case .text(let text) = message else { continue }
                        if await !group.send(text, from: member) { member.send(.text(Self.unavailableReply(to: text))) }
                    }
                }
                tasks.addTask {
                    for await out in output {
                        switch out {
                        case .message(.text(let text)): try await outbound.write(.text(text))
                        case .message(.binary(let bytes)): try await outbound.write(.binary(bytes))
                        case .close(let code, let reason):
                            try await outbound.close(code, reason: reason)
                            return
                        }
                    }
                }
                try await tasks.next()
                tasks.cancelAll()
            }
        } onGracefulShutdown: { [clients] in
            // Normally done before (ClusterHandOver); this is for a Router stopped otherwise.
            Task { await clients.leaveAll(patience: .zero) }
        }
    }

    /// The Router stops: every upstream leaves, and each client is told to connect again once
    /// what was on its way to it is written (waiting at most `patience` for all of that).
    func moveAll(patience: Duration) async {
        let deadline = ContinuousClock.now + patience
        await clients.leaveAll(patience: patience)
        while upstreams.clientCount > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Keeps `group`'s upstream connected to whichever pair plays its session, until its last
    /// client leaves, the session comes to this pair, or this Router stops.
    private func follow(_ group: SharedUpstream, first address: String) async {
        let (key, leaving) = clients.add()
        defer { clients.remove(key) }
        let leave = Task {
            for await _ in leaving {
                // The owner ends the upstream after the frames on their way; they are passed on.
                if await group.leave() { try? await Task.sleep(for: Self.leaveGrace) }
                upstreams.retire(group, Self.moved, Self.movedReason)
                clients.remove(key)
                return
            }
        }
        defer { leave.cancel() }
        var address = address
        while group.memberCount > 0 {
            let ending = await upstream(group, address: address)
            group.disconnected()
            if group.isLeaving { return upstreams.retire(group, Self.moved, Self.movedReason) }
            if case .refused(let frame) = ending { return upstreams.retire(group, frame.closeCode, frame.reason ?? "") }
            guard group.memberCount > 0 else { return }
            let placement: Placement
            do {
                placement = try await placeWaiting(group.key.session)
            } catch {
                return upstreams.retire(group, .init(codeNumber: 4000 + error.status.code), ClientConnections.closeReason(error))
            }
            guard case .remote(let next) = placement else { return upstreams.retire(group, Self.moved, Self.movedReason) }
            if next == address, case .lost = ending { try? await Task.sleep(for: .milliseconds(200)) }
            address = next
        }
    }

    /// The message a relay sends its upstream when its Router stops: the owner stops sending to
    /// it after the frames already on their way, keeps the frames after them for the clients'
    /// next connections, and closes the upstream with 4012 (ClientConnections).
    static let leaveMessage = #"{"op":"relay_leave"}"#
    /// How long a leaving relay waits for its owner to close the upstream.
    static let leaveGrace: Duration = .milliseconds(500)
    /// A relayed client is told to connect again: its next connection finds the session's owner.
    static let moved = WebSocketErrorCode(codeNumber: 4012)
    static let movedReason = "session_moved: connect again"

    enum UpstreamEnding {
        /// The owner went away, or the session moved on: look where it plays now.
        case lost
        /// The owner refused the client (a token it does not accept): the client is told so.
        case refused(WebSocketCloseFrame)
    }

    /// One upstream connection: the owner's messages go to the group's clients until the
    /// connection ends, the group has no client left, or the session's owner is no longer
    /// `address` and it has gone quiet (checked every second, so a pair cut off without closing
    /// its connections is left too). A pair handing the session over at a moment still to come
    /// keeps sending until then, and closes with 4012 after its last frame: the relay stays to the
    /// end of it.
    private func upstream(_ group: SharedUpstream, address: String) async -> UpstreamEnding {
        guard let request = group.firstRequest else { return .lost }
        let id = group.key.session
        let url = address.replacingOccurrences(of: "http", with: "ws", options: .anchored) + request.uri.description
        var headers = HTTPFields()
        if let authorization = request.headers[.authorization] { headers[.authorization] = authorization }
        headers[Self.forwardedHeader] = member.settings.pairID
        // A close handshake with an owner that was cut off waits out this, not 15 s.
        let configuration = WebSocketClientConfiguration(maxFrameSize: 1 << 16, additionalHeaders: headers, closeTimeout: .seconds(1))
        enum Outcome: Sendable {
            case closed(WebSocketCloseFrame?)
            case moved
        }
        let lastHeard = NIOLockedValueBox(ContinuousClock.now)
        let started = ContinuousClock.now
        do {
            let outcome = try await withThrowingTaskGroup(of: Outcome.self) { tasks in
                tasks.addTask {
                    // A connection to an owner cut off is not made until TCP gives up (10 s):
                    // when the session has moved meanwhile, it is left to fail by itself.
                    let connection = Task {
                        try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, upstreamOutbound, _ in
                            let generation = try await group.connected(upstreamOutbound)
                            // Until now the clients hear nothing: a slow connection to the owner
                            // (a name lookup, a connection not answered) is silence to them.
                            let took = ContinuousClock.now - started
                            if took > .seconds(1) {
                                logger.notice(
                                    "relay upstream connected late",
                                    metadata: ["session.id": "\(id)", "owner": "\(address)", "after": "\(took)"])
                            }
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                lastHeard.withLockedValue { $0 = .now }
                                guard group.received(message, generation: generation) else { break }
                            }
                        }
                    }
                    guard let result = await connection.resultUnlessCancelled() else { return .moved }
                    return .closed(try result.get())
                }
                tasks.addTask {
                    // The owner may change without this connection noticing (a pair cut off); a
                    // group whose clients have all left lets its upstream go.
                    while true {
                        try await Task.sleep(for: .seconds(1))
                        if group.memberCount == 0 { return .moved }
                        guard ContinuousClock.now - lastHeard.withLockedValue({ $0 }) > .milliseconds(500) else { continue }
                        if let placement = try? await member.place(id), placement != .remote(address) { return .moved }
                    }
                }
                let first = try await tasks.next() ?? .moved
                tasks.cancelAll()
                return first
            }
            if case .closed(let close?) = outcome, [4401, 4403, 1008].contains(UInt16(webSocketErrorCode: close.closeCode)) {
                return .refused(close)
            }
        } catch {
            logger.debug("relay upstream ended", metadata: ["session.id": "\(id)", "error": "\(error)"])
        }
        return .lost
    }

    /// The reply to a command sent while the session is between pairs.
    static func unavailableReply(to text: String) -> String {
        CommandReply.refusal(
            to: text, APIError(status: .serviceUnavailable, code: "cluster_unavailable", message: "the session is moving to another pair; try again in a moment"))
    }
}
