// Lavalink v4's routes on the Router's port (docs/lavalink.md): `/version`, `/v4/info`,
// `/v4/stats`, `/v4/loadtracks`, `/v4/decodetrack(s)`, the session and player routes, and the
// `/v4/websocket` a client opens first. Every answer and every error is shaped as Lavalink's:
// the password in `Authorization` (not a Tonearm token), errors as `{timestamp, status, error,
// message, path}` with `trace` on `?trace=true`.
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore
import ServiceSupport
import WireProtocol

struct LavalinkRoutes {
    let node: LavalinkNode
    let plugin: TonearmPlugin

    func addRoutes(to router: Router<TonearmRequestContext>) {
        router.add(middleware: LavalinkPassword(password: node.password))
        if let cluster = node.cluster { router.add(middleware: LavalinkForwarding(cluster: cluster)) }
        router.get("/version") { _, _ in
            Response(status: .ok, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: LavalinkJSON.version)))
        }
        router.get("/v4/info") { request, _ in await answer(request) { () async throws(LavalinkError) in LavalinkRoutes.info() } }
        router.get("/v4/stats") { request, _ in
            await answer(request) { () async throws(LavalinkError) in
                var usage = ProcessUsage()
                var stats = await node.stats(usage: &usage)
                stats["frameStats"] = nil
                return stats
            }
        }
        router.get("/v4/loadtracks") { request, _ in
            await answer(request) { () async throws(LavalinkError) in
                guard let identifier = RouterApplication.formQueryValue("identifier", in: request), !identifier.isEmpty else {
                    throw .badRequest("identifier is required")
                }
                return await LavalinkLoader(engine: node.engine).load(identifier)
            }
        }
        router.get("/v4/decodetrack") { request, _ in
            await answer(request) { () async throws(LavalinkError) in
                guard let encoded = RouterApplication.formQueryValue("encodedTrack", in: request) else {
                    throw .badRequest("encodedTrack is required")
                }
                return try Self.decoded(encoded)
            }
        }
        router.post("/v4/decodetracks") { request, _ in
            var request = request
            let body = try await request.collectBody(upTo: 1 << 20)
            return await answer(request) { () async throws(LavalinkError) in
                guard let list = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String] else {
                    throw .badRequest("the body must be a JSON array of encoded tracks")
                }
                return try list.map { (encoded) throws(LavalinkError) in try Self.decoded(encoded) }
            }
        }
        router.patch("/v4/sessions/:session") { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            return await answer(request) { () async throws(LavalinkError) in
                let id = context.parameters.get("session") ?? ""
                guard let object = LavalinkJSON.object(body.readableBytesView) else { throw .badRequest("the body must be a JSON object") }
                let timeout = try object["timeout"].map { (value) throws(LavalinkError) -> Int in
                    guard let seconds = PlayerUpdate.integer(value), (0...86_400).contains(seconds) else {
                        throw .badRequest("timeout must be a whole number of seconds from 0 to 86400")
                    }
                    return Int(seconds)
                }
                let resuming = object["resuming"].flatMap { PlayerUpdate.isBoolean($0) ? $0 as? Bool : nil }
                if object["resuming"] != nil, resuming == nil { throw .badRequest("resuming must be true or false") }
                let now = try await node.configure(id, resuming: resuming, timeout: timeout)
                return ["resuming": now.resuming, "timeout": now.timeout]
            }
        }
        router.get("/v4/sessions/:session/players") { request, context in
            await answer(request) { () async throws(LavalinkError) in
                try await node.players(of: context.parameters.get("session") ?? "")
            }
        }
        router.get("/v4/sessions/:session/players/:guild") { request, context in
            await answer(request) { () async throws(LavalinkError) in
                let session = try await node.session(context.parameters.get("session") ?? "")
                guard let player = session.player(try Self.guild(context)) else { throw .notFound("Player not found") }
                return await node.view(player)
            }
        }
        router.patch("/v4/sessions/:session/players/:guild") { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            return await answer(request) { () async throws(LavalinkError) in
                let session = try await node.session(context.parameters.get("session") ?? "")
                let guild = try Self.guild(context)
                guard let object = LavalinkJSON.object(body.readableBytesView) else { throw .badRequest("the body must be a JSON object") }
                let noReplace = request.uri.queryParameters["noReplace"] == "true"
                return try await node.update(guild, of: session, try PlayerUpdate(object), noReplace: noReplace)
            }
        }
        router.delete("/v4/sessions/:session/players/:guild") { request, context in
            await answer(request, status: .noContent) { () async throws(LavalinkError) in
                let session = try await node.session(context.parameters.get("session") ?? "")
                guard let player = session.removePlayer(try Self.guild(context)) else { throw .notFound("Player not found") }
                await node.destroy(player, of: session.id)
                return NSNull()
            }
        }
        router.ws("/v4/websocket") { _, _ in .upgrade([:]) } onUpgrade: { inbound, outbound, context in
            try await LavalinkSocket(node: node).serve(
                inbound: inbound, outbound: outbound, request: context.request, channel: context.requestContext.channel)
        }
        if node.cluster != nil {
            router.ws("/v4/cluster/feed") { _, _ in .upgrade([:]) } onUpgrade: { inbound, outbound, context in
                try await LavalinkFeeds.serve(
                    node: node, inbound: inbound, outbound: outbound, id: context.request.uri.queryParameters["session"].map(String.init) ?? "")
            }
        }
        plugin.addRoutes(to: router)
    }

    /// A guild id is a Discord id (a snowflake: up to 20 digits), as Lavalink reads it.
    static func guild(_ context: some RequestContext) throws(LavalinkError) -> SessionID {
        guard let raw = context.parameters.get("guild"), !raw.isEmpty, raw.utf8.count <= 20,
            raw.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let id = try? SessionID(raw)
        else { throw .badRequest("the guild id must be a Discord id (up to 20 digits)") }
        return id
    }

    static func decoded(_ encoded: String) throws(LavalinkError) -> JSONObject {
        do {
            return LavalinkJSON.track(encoded, try LavalinkTrackCodec.decode(encoded))
        } catch {
            throw .badRequest("not a track: \(error.description)")
        }
    }

    /// `/v4/info`: Tonearm's build, the sources it loads from, the filters it applies and its
    /// plugin (`TonearmPlugin`).
    static func info() -> JSONObject {
        [
            "version": ["semver": LavalinkJSON.version, "major": 4, "minor": 0, "patch": 0, "preRelease": NSNull(), "build": "tonearm"] as JSONObject,
            "buildTime": 0, "git": ["branch": "main", "commit": "tonearm", "commitTime": 0] as JSONObject,
            "jvm": "none (Tonearm is Swift)", "lavaplayer": "none (Tonearm decodes with FFmpeg's libraries)",
            "sourceManagers": ["http", "local", "youtube", "soundcloud"],
            "filters": ["volume", "equalizer", "karaoke", "timescale", "tremolo", "vibrato", "rotation", "distortion", "channelMix", "lowPass"],
            "plugins": [TonearmPlugin.info],
        ]
    }
}

/// Runs a route's body and answers its value as JSON, or its error in Lavalink's body.
func answer(
    _ request: Request, status: HTTPResponse.Status = .ok, _ body: () async throws(LavalinkError) -> Any
) async -> Response {
    do {
        let value = try await body()
        if status == .noContent { return Response(status: .noContent) }
        return LavalinkJSON.response(value, status: status)
    } catch {
        let trace = request.uri.queryParameters["trace"] == "true" ? "tonearm: \(error.code ?? "lavalink") \(error.message)" : nil
        return LavalinkJSON.error(status: error.status, message: error.message, path: request.uri.path, trace: trace)
    }
}

/// Lavalink's password, on every Lavalink route and on the WebSocket's upgrade: 401 in Lavalink's
/// error body without it, before any route runs.
struct LavalinkPassword: RouterMiddleware {
    typealias Context = TonearmRequestContext
    let password: String

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path == "/version" || path.hasPrefix("/v4/") else { return try await next(request, context) }
        guard let given = request.headers[.authorization], AccessControl.constantTimeEqual(given, password) else {
            return LavalinkJSON.error(status: .unauthorized, message: "Authorization is missing or wrong", path: path, trace: nil)
        }
        return try await next(request, context)
    }
}
