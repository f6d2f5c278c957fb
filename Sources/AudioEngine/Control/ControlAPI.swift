// The engine's HTTP control surface (loopback by default): plays and their controls, session
// state, yt-dlp resolution and search, health and metrics.
import CoreMetrics
import Foundation
import Hummingbird
import NIOCore
import Prometheus
import WireProtocol

/// Builds the control routes over a `SessionManager`.
struct ControlAPI: Sendable {
    let manager: SessionManager
    let socket: AudioSocketServer
    let resolver: SourceResolver
    var searchPrefix = "ytsearch"
    let startedAt = Date()
    static let version = "0.2.0"

    struct PlayRequest: Decodable {
        var url: String?
        var startMS: Int64?
        var volume: Int?
        enum CodingKeys: String, CodingKey {
            case url, volume
            case startMS = "start_ms"
        }
    }
    struct VolumeRequest: Decodable { var volume: Int? }
    struct SeekRequest: Decodable {
        var positionMS: Int64?
        var playID: UInt64?
        enum CodingKeys: String, CodingKey {
            case positionMS = "position_ms"
            case playID = "play_id"
        }
    }
    /// Pause and resume may name the play they are meant for.
    struct PlayTarget: Decodable {
        var playID: UInt64?
        enum CodingKeys: String, CodingKey { case playID = "play_id" }
    }

    struct StopResult: Codable, Equatable {
        var sessionID: SessionID
        var stopped: Bool
        enum CodingKeys: String, CodingKey {
            case sessionID = "session_id"
            case stopped
        }
    }

    struct SessionList: Codable { var sessions: [SessionInfo] }
    struct SearchResults: Codable { var results: [TrackMetadata] }

    struct Health: Codable {
        var status: String
        var version: String
        var uptimeSeconds: Double
        var sessions: [String: Int]
        var playing: Int
        var routerConnections: Int
        var frames: FrameCounters
        var droppedFrames: UInt64
        var rssBytes: Int
        enum CodingKeys: String, CodingKey {
            case status, version, sessions, playing, frames
            case uptimeSeconds = "uptime_seconds"
            case routerConnections = "router_connections"
            case droppedFrames = "dropped_frames"
            case rssBytes = "rss_bytes"
        }
    }

    func addRoutes(to router: Router<some RequestContext>) {
        router.add(middleware: JSONErrorMiddleware())
        router.post("/session/:id/play") { request, context -> EditedResponse<PlayStarted> in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(PlayRequest.self, request, context)
            guard let url = body.url, !url.trimmingCharacters(in: .whitespaces).isEmpty else {
                throw ControlError.badRequest(
                    "the body needs \"url\": an http(s) URL or a file name inside the media directory",
                    code: "missing_url")
            }
            let started = try manager.play(sessionID: id, url: url, startMS: body.startMS ?? 0, volume: body.volume)
            return EditedResponse(status: .accepted, response: started)
        }
        router.post("/session/:id/stop") { _, context -> StopResult in
            let id = try Self.sessionID(context)
            return StopResult(sessionID: id, stopped: manager.stop(sessionID: id))
        }
        router.post("/session/:id/pause") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let target = try await Self.decode(PlayTarget.self, request, context, empty: PlayTarget())
            return try manager.pause(sessionID: id, playID: target.playID)
        }
        router.post("/session/:id/resume") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let target = try await Self.decode(PlayTarget.self, request, context, empty: PlayTarget())
            return try manager.resume(sessionID: id, playID: target.playID)
        }
        router.post("/session/:id/volume") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(VolumeRequest.self, request, context)
            guard let volume = body.volume else {
                throw ControlError.badRequest("the body needs \"volume\": a percentage from 0 to 1000", code: "invalid_volume")
            }
            return try manager.setVolume(sessionID: id, volume: volume)
        }
        router.post("/session/:id/seek") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(SeekRequest.self, request, context)
            guard let position = body.positionMS else {
                throw ControlError.badRequest("the body needs \"position_ms\": milliseconds from the start", code: "invalid_position")
            }
            return try manager.seek(sessionID: id, positionMS: position, playID: body.playID)
        }
        router.get("/session/:id") { _, context -> SessionInfo in
            try manager.info(sessionID: try Self.sessionID(context))
        }
        router.get("/sessions") { _, _ -> SessionList in
            SessionList(sessions: manager.list())
        }
        router.get("/resolve") { request, _ -> YTDLP.Resolution in
            guard let url = request.uri.queryParameters["url"].map(String.init), !url.isEmpty else {
                throw ControlError.badRequest("give the URL to resolve as ?url=", code: "missing_url")
            }
            return try await resolve(url)
        }
        router.get("/search") { request, _ -> SearchResults in
            guard let query = request.uri.queryParameters["q"].map(String.init),
                !query.trimmingCharacters(in: .whitespaces).isEmpty
            else { throw ControlError.badRequest("give the search words as ?q=", code: "missing_query") }
            let limitText = request.uri.queryParameters["limit"].map(String.init) ?? "10"
            guard let limit = Int(limitText), (1...50).contains(limit) else {
                throw ControlError.badRequest("\"limit\" is a number from 1 to 50, got \(limitText)", code: "invalid_limit")
            }
            return SearchResults(results: try await resolver.ytdlp.search(query, limit: limit, prefix: searchPrefix))
        }
        router.get("/metrics") { _, _ -> Response in
            let metrics = manager.metrics
            for (state, count) in manager.countsByState { metrics.sessions[state]?.record(count) }
            metrics.routerConnections.record(socket.stats.connections)
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            let text = metrics.registry?.emitToBuffer() ?? []
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
        router.get("/health") { _, _ -> Health in
            let stats = socket.stats
            let counts = manager.countsByState
            return Health(
                status: "ok", version: Self.version, uptimeSeconds: Date().timeIntervalSince(startedAt),
                sessions: Dictionary(uniqueKeysWithValues: counts.map { ($0.key.rawValue, $0.value) }),
                playing: counts[.streaming] ?? 0, routerConnections: stats.connections, frames: manager.totals,
                droppedFrames: stats.droppedFrames, rssBytes: ResourceUsage.residentBytes())
        }
    }

    /// Metadata for `url`: media-directory files and direct media describe themselves; pages
    /// (and playlists) go through yt-dlp.
    private func resolve(_ url: String) async throws -> YTDLP.Resolution {
        switch try resolver.plan(url) {
        case .page(let page):
            try await resolver.checkPage(page)
            return try await resolver.ytdlp.resolve(page)
        case .ready(let source):
            // Opening costs a thread (and a connection): through the same gate as yt-dlp.
            let info = try await resolver.ytdlp.gate.run { [network = resolver.network] in
                try await Self.offloaded { try Self.describe(source, network: network) }
            }
            return YTDLP.Resolution(
                url: url, title: info.title ?? source.displayName, durationMS: info.durationMS,
                thumbnail: nil, isLive: info.durationMS == nil, isPlaylist: false, entries: [])
        }
    }

    /// Opens `source` far enough to say what it holds (blocks: call it off the cooperative pool).
    private static func describe(_ source: ResolvedSource, network: SourceNetwork) throws -> MediaInfo {
        do {
            guard source.isNetwork else { return try MediaDemuxer(path: source.location).info }
            var settings = ReadAheadInput.Configuration()
            settings.headers = source.headers
            let thread = SourceDemuxThread(url: source.location, network: network, configuration: settings)
            defer { thread.close() }
            return try thread.waitUntilOpen().info
        } catch {
            throw ControlError.unplayable(error)
        }
    }

    /// Runs blocking work (FFmpeg opening a source) off Swift's cooperative pool.
    private static func offloaded<T>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }

    /// The id in the path, percent-decoded exactly once (the Router escapes every byte that is
    /// not unreserved); a segment that is not valid percent-encoding is refused.
    static func sessionID(_ context: some RequestContext) throws(ControlError) -> SessionID {
        guard let decoded = (context.parameters.get("id") ?? "").removingPercentEncoding else {
            throw .badRequest("the session id in the path is not valid percent-encoding", code: "invalid_session_id")
        }
        do {
            return try SessionID(decoded)
        } catch {
            throw .badRequest(error.description, code: "invalid_session_id")
        }
    }

    /// The JSON body as `T`; an empty body is `empty` when given, else refused.
    static func decode<T: Decodable>(
        _ type: T.Type, _ request: Request, _ context: some RequestContext, empty: T? = nil
    ) async throws -> T {
        var request = request
        let buffer = try await request.collectBody(upTo: 64 * 1024)
        guard buffer.readableBytesView.contains(where: { !" \r\n\t".utf8.contains($0) }) else {
            if let empty { return empty }
            throw ControlError.badRequest("the body is empty; send a JSON object", code: "invalid_json")
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
        } catch {
            throw ControlError.badRequest("the body is not the expected JSON object: \(error)", code: "invalid_json")
        }
    }
}

extension PlayStarted: ResponseEncodable {}
extension SessionInfo: ResponseEncodable {}
extension YTDLP.Resolution: ResponseEncodable {}
extension ControlAPI.StopResult: ResponseEncodable {}
extension ControlAPI.SessionList: ResponseEncodable {}
extension ControlAPI.SearchResults: ResponseEncodable {}
extension ControlAPI.Health: ResponseEncodable {}

/// Answers every error as `{"error":{"code","message"}}`, whatever threw it.
struct JSONErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as ControlError {
            throw error
        } catch let error as HTTPError {
            throw ControlError(
                status: error.status, code: error.status == .notFound ? "not_found" : "http_\(error.status.code)",
                message: error.body ?? error.status.reasonPhrase)
        } catch {
            throw ControlError(status: .internalServerError, code: "internal", message: "\(error)")
        }
    }
}

