// The Router's HTTP surface: the playground page, identities, the session API (queues and
// controls through each session's controller), search and resolve (through the engine), the
// browser and bot WebSockets, Ogg listening, health and metrics.
import EngineAPI
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import ServiceSupport
import Synchronization
import WireProtocol

/// Builds the Router's routes.
struct RouterApplication {
    let store: SessionStore
    let directory: SessionDirectory
    let link: EngineLink
    let engine: EngineClient
    let access: AccessControl
    /// Identities minted per client address (nil: no limit).
    var identityLimit: RateLimiter? = nil
    /// How storing sessions goes, for `/health` and `/metrics` (nil: nothing is stored).
    var storage: PersistenceWriter? = nil
    var clientAddress = ClientAddress(trustedProxies: TrustedProxies())
    /// In a cluster: forwards and relays what concerns sessions other pairs own.
    var relay: ClusterRelay? = nil
    /// In a cluster: the stations other pairs play that this Router relays to its followers.
    var stations: StationRelays? = nil
    /// The sessions' HLS segmenters, shared with `HLSFastPath` (nil: made here).
    var hls: HLSOutput? = nil
    /// The sessions' Discord voice connections (nil: made here, checked against the system's roots).
    var voice: VoiceConnections? = nil
    /// Lavalink v4's API (nil: not served; TONEARM_LAVALINK_PASSWORD).
    var lavalink: LavalinkNode? = nil
    let startedAt = Date()
    let metrics = RouterMetrics()

    func makeRouter(publicDirectory: String?) -> Router<TonearmRequestContext> {
        let router = Router(context: TonearmRequestContext.self)
        let routes = RouteTable()
        router.add(middleware: APIErrorMiddleware(routes: routes))
        if let relay { router.add(middleware: ClusterForwarding(relay: relay, access: access)) }
        if let publicDirectory {
            router.add(middleware: FileMiddleware(publicDirectory, searchForIndexHtml: true))
            // The API's OpenAPI document, kept beside the page (OpenAPIDocumentTests holds it to
            // the routes below). The file middleware serves it; the route puts it in the route
            // list, so other methods get 405 and the document's own entry is checked.
            if let document = FileManager.default.contents(atPath: publicDirectory + "/openapi.json") {
                router.get("/openapi.json") { _, _ in Response.json(status: .ok, document) }
            }
        }
        router.post("/api/identity") { request, context -> Identity in
            let client = clientAddress.of(request, peer: context.channel.remoteAddress)
            if let limit = identityLimit, let wait = limit.admit(client) {
                throw APIError(
                    status: .tooManyRequests, code: "rate_limited",
                    message: "this address has made \(limit.burst) identities lately, the most it may at once "
                        + "(\(limit.perMinute) more a minute); keep the one you have, or try again later",
                    retryAfterSeconds: max(1, Int(wait.components.seconds) + 1))
            }
            return access.tokens.issue()
        }
        addSessionRoutes(to: router)
        router.get("/api/sessions") { request, _ -> SessionListing in
            try access.requireBot(request)
            return SessionListing(sessions: await directory.listing())
        }
        router.get("/api/search") { request, context -> Response in
            let owner = try access.anyone(request)
            guard let query = request.uri.queryParameters["q"].map(String.init), !query.isEmpty else {
                throw APIError.badRequest("missing_query", "give the search words as ?q=")
            }
            let limit = request.uri.queryParameters["limit"].flatMap { Int(String($0)) }
            try link.requireConnected(engine)
            let reply = try await untilClientLeaves(context.channel) { () async throws(APIError) in
                try await engine.search(query, limit: limit, owner: owner)
            }
            return Response.json(status: .ok, reply.body.readableBytesView)
        }
        router.get("/api/resolve") { request, context -> Resolution in
            let owner = try access.anyone(request)
            guard let url = request.uri.queryParameters["url"].map(String.init), !url.isEmpty else {
                throw APIError.badRequest("missing_url", "give the URL to resolve as ?url=")
            }
            try link.requireConnected(engine)
            return try await untilClientLeaves(context.channel) { () async throws(APIError) in
                try await engine.resolve(url, owner: owner)
            }
        }
        ClusterRoutes(member: relay?.member, access: access).addRoutes(to: router)
        if let lavalink {
            let plugin = TonearmPlugin(
                node: lavalink, layers: LayerCommands(directory: directory, link: link, engine: engine), tokens: access.tokens)
            LavalinkRoutes(node: lavalink, plugin: plugin).addRoutes(to: router)
        }
        var clients = ClientConnections(
            store: store, directory: directory, access: access, link: link, engine: engine, feeds: ListenFeeds(store: store) { id, chains, first in
                let last = store.findBySessionId(id)?.lastTrackStart
                return ListenFeed(eventLoop: first.eventLoop, chains: chains, title: last?.title, artist: last?.artist)
            },
            batches: FrameBatchFeeds(store: store) { _, frames, first in
                FrameBatchFeed(eventLoop: first.eventLoop, framesPerMessage: frames)
            })
        clients.relay = relay
        clients.hls = hls ?? HLSOutput(store: store)
        clients.voice = voice ?? VoiceConnections(store: store, trustRoots: nil, logger: Logger(label: "tonearm.voice"))
        clients.addRoutes(to: router)
        OperationsRoutes(
            store: store, directory: directory, link: link, storage: storage, startedAt: startedAt, recorder: metrics,
            relay: relay, stations: stations
        ).addRoutes(to: router)
        routes.load(from: router)
        return router
    }

    /// `GET /api/sessions/{id}`, `POST /api/sessions/{id}/{command}`, `DELETE …/queue[/{index}]`.
    private func addSessionRoutes(to router: Router<TonearmRequestContext>) {
        router.get("/api/sessions/:id") { request, context -> SessionView in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            return try await directory.using(id) { await $0.state }
        }
        // One route per command, so each has its own body in the OpenAPI document; any other name
        // is answered with the list of commands.
        for name in CommandParsing.names {
            router.post(RouterPath("/api/sessions/:id/\(name)")) { request, context -> Response in
                try await command(name, request, context)
            }
        }
        router.post("/api/sessions/:id/:command") { request, context -> Response in
            try await command(context.parameters.get("command") ?? "", request, context)
        }
        router.post("/api/sessions/:id/layers") { request, context -> Response in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            let started = try await LayerCommands(directory: directory, link: link, engine: engine)
                .add(try LayerCommands.request(Data(body.readableBytesView)), on: id)
            return Response.json(status: .accepted, (try? JSONCoding.encoder.encode(started)) ?? Data())
        }
        // A token that hears the session and cannot control it, for listeners by the thousand.
        router.post("/api/sessions/:id/listen-token") { request, context -> ListenToken in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            return ListenToken(sessionID: id, token: access.tokens.listenToken(for: id))
        }
        router.delete("/api/sessions/:id/layers/:layer_id") { request, context -> Response in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            let layer = try LayerCommands.layerID(context.parameters.get("layer_id").flatMap { UInt64($0) })
            let stopped = try await LayerCommands(directory: directory, link: link, engine: engine).remove(layer, on: id)
            return Response.json(status: .ok, (try? JSONCoding.encoder.encode(stopped)) ?? Data())
        }
        router.delete("/api/sessions/:id/queue") { request, context -> Response in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            return try await perform(.clear, on: id)
        }
        router.delete("/api/sessions/:id/queue/:index") { request, context -> Response in
            let id = try Self.sessionID(context)
            try access.authorize(request, for: id)
            guard let index = context.parameters.get("index").flatMap({ Int($0) }) else {
                throw APIError.badRequest("invalid_index", "the queue position must be a whole number")
            }
            return try await perform(.remove(index: try CommandParsing.queueIndex(index)), on: id)
        }
    }

    /// `POST /api/sessions/{id}/{name}` with the command's arguments as the JSON body.
    private func command(_ name: String, _ request: Request, _ context: TonearmRequestContext) async throws -> Response {
        let id = try Self.sessionID(context)
        try access.authorize(request, for: id)
        var request = request
        let body = try await request.collectBody(upTo: 64 * 1024)
        let arguments = try CommandParsing.arguments(Data(body.readableBytesView))
        let command = try CommandParsing.command(name, arguments: arguments)
        try access.authorizeFollowing(command, token: arguments.token, callerToken: AccessControl.token(in: request))
        return try await perform(command, on: id, browser: !access.isBot(request))
    }

    private func perform(_ command: SessionCommand, on id: SessionID, browser: Bool = false) async throws -> Response {
        let state = try await SessionCommands(directory: directory, link: link, engine: engine).run(command, on: id, browser: browser)
        // A play is accepted: its audio follows once the engine has opened the source. So is a
        // queued URL still resolving.
        let status: HTTPResponse.Status =
            switch command {
            case .play: .accepted
            case .enqueue(let url) where state.resolving.contains(PendingTrack(url: url, command: "queue")): .accepted
            default: .ok
            }
        return Response.json(status: status, Data(state.json().utf8))
    }

    static func sessionID(_ context: some RequestContext) throws(APIError) -> SessionID {
        try sessionID(path: context.parameters.get("id"))
    }

    /// An id from a path segment, which arrives percent-encoded: decoded exactly once, so
    /// `x%2541` is the id `x%41` and `x%41` the id `xA` — two ids, never one. A segment that is
    /// not valid percent-encoding is refused, not taken as it stands.
    static func sessionID(path raw: String?) throws(APIError) -> SessionID {
        guard let raw, !raw.isEmpty else { throw missingSessionID }
        guard let decoded = raw.removingPercentEncoding else {
            throw .badRequest("invalid_session_id", "the session id in the path is not valid percent-encoding")
        }
        return try sessionID(decoded: decoded)
    }

    /// An id from a query parameter: Hummingbird has already decoded it once, and it is taken
    /// exactly as it is (decoding it again would make look-alike ids one).
    static func sessionID(query raw: String?) throws(APIError) -> SessionID {
        guard let raw, !raw.isEmpty else { throw missingSessionID }
        return try sessionID(decoded: raw)
    }

    /// The query parameter `name` of `request`, read as a form encodes it: a `+` is a space (as
    /// every form and URL encoder writes one), `%2B` a plus. Hummingbird keeps a `+` as it is, so
    /// `?guild=+S` (the id " S", which no session may have) would pass for the id "+S".
    static func formQueryValue(_ name: String, in request: Request) -> String? {
        guard let query = request.uri.query else { return nil }
        for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts[0] == name else { continue }
            let raw = parts.count > 1 ? String(parts[1]) : ""
            return raw.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? raw
        }
        return nil
    }

    private static func sessionID(decoded: String) throws(APIError) -> SessionID {
        do {
            return try SessionID(decoded)
        } catch {
            throw .badRequest("invalid_session_id", error.description)
        }
    }

    private static var missingSessionID: APIError {
        .badRequest("invalid_session_id", "a session id is required (1 to 24 printable ASCII characters, no spaces)")
    }
}
