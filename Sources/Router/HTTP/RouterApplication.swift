// The Router's HTTP and WebSocket surface: the playground page, the session API (forwarded to
// the engine), the per-session WebSocket, and health.
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import WireProtocol

/// Builds the Router's routes over its store, engine link and engine client.
struct RouterApplication {
    let store: SessionStore
    let link: EngineLink
    let engine: EngineClient
    let access: AccessControl
    let startedAt = Date()

    struct Health: ResponseEncodable {
        struct Engine: Codable {
            var connected: Bool
            var connects: UInt64
            var protocolErrors: UInt64
            var lastError: String?
            enum CodingKeys: String, CodingKey {
                case connected, connects
                case protocolErrors = "protocol_errors"
                case lastError = "last_error"
            }
        }
        var status: String
        var uptimeSeconds: Double
        var engine: Engine
        var activeSessions: Int
        var activeClients: Int
        var framesRouted: UInt64
        var unknownSessionFrames: UInt64
        var slowClientDrops: UInt64
        enum CodingKeys: String, CodingKey {
            case status, engine
            case uptimeSeconds = "uptime_seconds"
            case activeSessions = "active_sessions"
            case activeClients = "active_clients"
            case framesRouted = "frames_routed"
            case unknownSessionFrames = "unknown_session_frames"
            case slowClientDrops = "slow_client_drops"
        }
    }

    func makeRouter(publicDirectory: String?) -> Hummingbird.Router<BasicWebSocketRequestContext> {
        let router = Hummingbird.Router(context: BasicWebSocketRequestContext.self)
        router.add(middleware: APIErrorMiddleware())
        if let publicDirectory {
            router.add(middleware: FileMiddleware(publicDirectory, searchForIndexHtml: true))
        }
        router.post("/api/sessions/:id/play") { request, context -> Response in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            try requireEngine()
            store.register(id)
            return Self.relay(try await engine.play(id, body: body))
        }
        router.post("/api/sessions/:id/stop") { request, context -> Response in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            try requireEngine()
            return Self.relay(try await engine.stop(id))
        }
        router.get("/health") { _, _ -> Health in
            let status = link.status
            let counters = store.counters
            return Health(
                status: status.connected ? "ok" : "degraded", uptimeSeconds: Date().timeIntervalSince(startedAt),
                engine: .init(
                    connected: status.connected, connects: status.connects, protocolErrors: status.protocolErrors,
                    lastError: status.lastError),
                activeSessions: store.sessionCount, activeClients: store.clientCount,
                framesRouted: counters.framesRouted, unknownSessionFrames: counters.unknownSessionFrames,
                slowClientDrops: counters.slowClientDrops)
        }
        router.post("/api/identity") { _, _ -> Identity in
            access.tokens.issue()
        }
        router.get("/listen/:file") { request, context -> Response in
            let file = context.parameters.get("file") ?? ""
            guard file.hasSuffix(".ogg") else {
                throw APIError(status: .notFound, code: "not_found", message: "listen at /listen/{session id}.ogg")
            }
            let id = try Self.sessionID(query: String(file.dropLast(4)))
            try access.authorize(request, for: id)
            return listen(to: id)
        }
        router.ws("/ws") { request, _ in
            _ = try access.webSocketSession(request)
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            let id = try access.webSocketSession(context.request)
            try await stream(store.subscribe(id), inbound: inbound, outbound: outbound)
        }
        return router
    }

    /// The session as an endless Ogg Opus stream, for as long as the listener stays.
    private func listen(to id: SessionID) -> Response {
        let subscription = store.subscribe(id)
        let title = store.findBySessionId(id)?.lastEvent?.title
        var headers = HTTPFields()
        headers[.contentType] = "audio/ogg"
        headers[.cacheControl] = "no-store"
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { [store] writer in
                defer { store.unsubscribe(subscription.sessionID, token: subscription.token) }
                var ogg = OggOpusWriter()
                try await writer.write(ogg.headers(title: title))
                for await message in subscription.messages {
                    if case .audio(let packet) = message { try await writer.write(ogg.page(for: packet)) }
                }
                try await writer.finish(nil)
            })
    }

    /// Writes the subscription to the socket until either side ends.
    private func stream(
        _ subscription: Subscription, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter
    ) async throws {
        defer { store.unsubscribe(subscription.sessionID, token: subscription.token) }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                // Commands arrive in a later issue; reading keeps pings answered and notices a close.
                for try await _ in inbound {}
            }
            group.addTask {
                for await message in subscription.messages {
                    switch message {
                    case .audio(let packet): try await outbound.write(.binary(packet))
                    case .event(let line): try await outbound.write(.text(line))
                    }
                }
            }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Fails fast while the engine link is down, instead of waiting on its control port.
    private func requireEngine() throws(APIError) {
        guard link.status.connected else { throw EngineClient.unavailable(engine.baseURL) }
    }

    private static func relay(_ reply: EngineReply) -> Response {
        Response.json(status: .init(code: reply.status), reply.body.readableBytesView)
    }

    static func sessionID(_ context: some RequestContext) throws(APIError) -> SessionID {
        try sessionID(query: context.parameters.get("id"))
    }

    static func sessionID(query raw: String?) throws(APIError) -> SessionID {
        guard let raw, !raw.isEmpty else {
            throw .badRequest("invalid_session_id", "a session id is required (1 to 24 printable ASCII characters, no spaces)")
        }
        do {
            return try SessionID(raw.removingPercentEncoding ?? raw)
        } catch {
            throw .badRequest("invalid_session_id", error.description)
        }
    }
}
