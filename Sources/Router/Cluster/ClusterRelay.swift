// Any Router serves any client: a request for a session another pair owns is carried to that
// pair's Router and its answer back — REST and `/listen` forwarded as they came, a WebSocket
// client (`/ws`, `/bot`) relayed frame for frame over an upstream WebSocket to the owner.
//
// A relayed client stays connected while its session moves: when the owner changes (the old one
// died, was cut off, or drained) the relay connects to the new owner, whose state message comes
// first, and the audio goes on. A client's command sent while no upstream is connected is
// answered with a `cluster_unavailable` reply. Forwarded requests carry `X-Tonearm-Forwarded`,
// and a Router never forwards such a request again (no loops while ownership changes).
import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import HummingbirdWSClient
import Logging
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
    /// The clients relayed now, moved when the Router stops.
    var clients = RelayedClients()

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

    /// Relays a WebSocket client of session `id` to its owner, following the session from pair
    /// to pair, until the client leaves or the session comes to this pair (then the client is
    /// told to connect again, with 4012, and is served here). When this Router stops, the client
    /// is moved as a hand-over moves one (`leave`): nothing it was to hear is skipped.
    func relay(
        _ id: SessionID, first address: String, request: Request, inbound: WebSocketInboundStream,
        outbound: WebSocketOutboundWriter
    ) async throws {
        let slot = UpstreamSlot()
        let (key, leaving) = clients.add()
        defer { clients.remove(key) }
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                // The client's messages go to whichever upstream is connected.
                group.addTask {
                    for try await message in inbound.messages(maxSize: 64 * 1024) {
                        guard case .text(let text) = message else { continue }
                        slot.remember(text)
                        if let writer = slot.writer.withLock({ $0 }), (try? await writer.write(.text(text))) != nil { continue }
                        try await outbound.write(.text(Self.unavailableReply(to: text)))
                    }
                }
                group.addTask {
                    var address = address
                    while true {
                        let ending = await upstream(id, address: address, request: request, outbound: outbound, slot: slot)
                        slot.writer.withLock { $0 = nil }
                        if slot.isLeaving {
                            try await Self.move(outbound, slot)
                            return
                        }
                        if case .refused(let frame) = ending {
                            try await outbound.close(frame.closeCode, reason: frame.reason)
                            return
                        }
                        let placement = try await placeWaiting(id)
                        guard case .remote(let next) = placement else {
                            try await Self.move(outbound, slot)
                            return
                        }
                        if next == address, case .lost = ending { try await Task.sleep(for: .milliseconds(200)) }
                        address = next
                    }
                }
                group.addTask {
                    for await _ in leaving {
                        try await self.leave(outbound, slot)
                        return
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        } onGracefulShutdown: { [clients] in
            // Normally done before (ClusterHandOver); this is for a Router stopped otherwise.
            Task { await clients.leaveAll(patience: .zero) }
        }
    }

    /// The message a relay sends its upstream when its Router stops: the owner stops sending to
    /// it after the frames already on their way, keeps the frames after them for the client's
    /// next connection, and closes the upstream with 4012 (ClientConnections).
    static let leaveMessage = #"{"op":"relay_leave"}"#
    /// How long a leaving relay waits for its owner to close the upstream.
    static let leaveGrace: Duration = .milliseconds(500)

    /// This Router stops: the upstream is asked to end after the frames sent so far, which are
    /// passed on; then the client is told to connect again (4012), at once if no upstream is
    /// connected, after `leaveGrace` at the latest.
    private func leave(_ outbound: WebSocketOutboundWriter, _ slot: UpstreamSlot) async throws {
        slot.leaving.store(true, ordering: .relaxed)
        if let writer = slot.writer.withLock({ $0 }), (try? await writer.write(.text(Self.leaveMessage))) != nil {
            try await Task.sleep(for: Self.leaveGrace)
        }
        try await Self.move(outbound, slot)
    }

    /// Closes the client with 4012 (once): its next connection finds the session's owner.
    private static func move(_ outbound: WebSocketOutboundWriter, _ slot: UpstreamSlot) async throws {
        guard !slot.moved.exchange(true, ordering: .relaxed) else { return }
        try await outbound.close(.init(codeNumber: 4012), reason: "session_moved: connect again")
    }

    enum UpstreamEnding {
        /// The owner went away, or the session moved on: look where it plays now.
        case lost
        /// The owner refused the client (a token it does not accept): the client is told so.
        case refused(WebSocketCloseFrame)
    }

    /// One upstream connection: the owner's messages go to the client until the connection ends
    /// or the session's owner is no longer `address` and it has gone quiet (checked every second,
    /// so a pair cut off without closing its connections is left too). A pair handing the session
    /// over at a moment still to come keeps sending until then, and closes with 4012 after its
    /// last frame: the relay stays to the end of it.
    private func upstream(
        _ id: SessionID, address: String, request: Request, outbound: WebSocketOutboundWriter,
        slot writer: UpstreamSlot
    ) async -> UpstreamEnding {
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
        writer.lastHeard.withLock { $0 = .now }
        let started = ContinuousClock.now
        do {
            let outcome = try await withThrowingTaskGroup(of: Outcome.self) { group in
                group.addTask {
                    // A connection to an owner cut off is not made until TCP gives up (10 s):
                    // when the session has moved meanwhile, it is left to fail by itself.
                    let connection = Task {
                        try await WebSocketClient.connect(url: url, configuration: configuration, logger: logger) { inbound, upstreamOutbound, _ in
                            if let voice = writer.voice.withLock({ $0 }) { try await upstreamOutbound.write(.text(voice)) }
                            writer.writer.withLock { $0 = upstreamOutbound }
                            // Until now the client hears nothing: a slow connection to the owner
                            // (a name lookup, a connection not answered) is silence to it.
                            let took = ContinuousClock.now - started
                            if took > .seconds(1) {
                                logger.notice(
                                    "relay upstream connected late",
                                    metadata: ["session.id": "\(id)", "owner": "\(address)", "after": "\(took)"])
                            }
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                writer.lastHeard.withLock { $0 = .now }
                                switch message {
                                case .binary(let bytes): try await outbound.write(.binary(bytes))
                                case .text(let text):
                                    if UpstreamSlot.isReplayReply(text) { continue }
                                    try await outbound.write(.text(text))
                                }
                            }
                        }
                    }
                    guard let result = await connection.resultUnlessCancelled() else { return .moved }
                    return .closed(try result.get())
                }
                group.addTask {
                    // The owner may change without this connection noticing (a pair cut off).
                    while true {
                        try await Task.sleep(for: .seconds(1))
                        guard ContinuousClock.now - writer.lastHeard.withLock({ $0 }) > .milliseconds(500) else { continue }
                        if let placement = try? await member.place(id), placement != .remote(address) { return .moved }
                    }
                }
                let first = try await group.next() ?? .moved
                group.cancelAll()
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
        let id = (try? CommandParsing.envelope(Data(text.utf8)))?.id
        var reply = CommandReply(id: id)
        reply.error = ErrorBody(code: "cluster_unavailable", message: "the session is moving to another pair; try again in a moment").error
        return reply.json()
    }
}

/// The upstream connection a relayed client's commands go to, while there is one.
final class UpstreamSlot: Sendable {
    let writer = Mutex<WebSocketOutboundWriter?>(nil)
    /// When the upstream last sent anything.
    let lastHeard = Mutex(ContinuousClock.now)
    /// The Router is stopping: the relay moves its client once the upstream ends.
    let leaving = Atomic<Bool>(false)
    /// The client has been told to connect again.
    let moved = Atomic<Bool>(false)
    var isLeaving: Bool { leaving.load(ordering: .relaxed) }
    /// The client's last `voice` command (nil after `voice_leave`), sent first on every new
    /// upstream: a bot's guild keeps its Discord voice when the session moves on, although the bot
    /// stays connected here and has no reason to send its credentials again. It goes with
    /// `replayID` for its id, and the owner's reply to it is not passed on.
    let voice = Mutex<String?>(nil)
    static let replayID = "tonearm-relay-voice"

    func remember(_ text: String) {
        guard text.contains("voice"), let data = text.data(using: .utf8),
            var command = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any], let op = command["op"] as? String
        else { return }
        if op == "voice_leave" {
            voice.withLock { $0 = nil }
        } else if op == "voice" {
            command["id"] = Self.replayID
            guard let replay = try? JSONSerialization.data(withJSONObject: command) else { return }
            voice.withLock { $0 = String(decoding: replay, as: UTF8.self) }
        }
    }

    /// The owner's reply to a replayed `voice` command.
    static func isReplayReply(_ text: String) -> Bool {
        text.contains(replayID) && text.contains(#""id":"\#(replayID)""#)
    }
}
