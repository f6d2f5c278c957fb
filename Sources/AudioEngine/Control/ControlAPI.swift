// The engine's HTTP control surface (loopback by default): start and stop plays, and health.
import Foundation
import Hummingbird
import NIOCore
import WireProtocol

/// Builds the control routes over a `SessionManager`.
struct ControlAPI {
    let manager: SessionManager
    let socket: AudioSocketServer
    let startedAt = Date()
    static let version = "0.1.0"

    struct PlayRequest: Decodable {
        var url: String?
    }

    struct StopResult: Codable, Equatable {
        var sessionID: SessionID
        var stopped: Bool
        enum CodingKeys: String, CodingKey {
            case sessionID = "session_id"
            case stopped
        }
    }

    struct Health: Codable {
        var status: String
        var version: String
        var uptimeSeconds: Double
        var sessions: Int
        var routerConnections: Int
        var frames: FrameCounters
        var droppedFrames: UInt64
        enum CodingKeys: String, CodingKey {
            case status, version, sessions, frames
            case uptimeSeconds = "uptime_seconds"
            case routerConnections = "router_connections"
            case droppedFrames = "dropped_frames"
        }
    }

    func addRoutes(to router: Router<some RequestContext>) {
        router.add(middleware: JSONErrorMiddleware())
        router.post("/session/:id/play") { request, context -> EditedResponse<PlayStarted> in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(PlayRequest.self, request, context)
            guard let url = body.url else {
                throw ControlError.badRequest(
                    "the body needs \"url\": a file name inside the media directory", code: "missing_url")
            }
            let started = try manager.play(sessionID: id, url: url)
            return EditedResponse(status: .accepted, response: started)
        }
        router.post("/session/:id/stop") { _, context -> StopResult in
            let id = try Self.sessionID(context)
            return StopResult(sessionID: id, stopped: manager.stop(sessionID: id))
        }
        router.get("/health") { _, _ -> Health in
            let stats = socket.stats
            return Health(
                status: "ok", version: Self.version, uptimeSeconds: Date().timeIntervalSince(startedAt),
                sessions: manager.sessionCount, routerConnections: stats.connections, frames: manager.totals,
                droppedFrames: stats.droppedFrames)
        }
    }

    static func sessionID(_ context: some RequestContext) throws(ControlError) -> SessionID {
        let raw = context.parameters.get("id") ?? ""
        do {
            return try SessionID(raw.removingPercentEncoding ?? raw)
        } catch {
            throw .badRequest(error.description, code: "invalid_session_id")
        }
    }

    static func decode<T: Decodable>(
        _ type: T.Type, _ request: Request, _ context: some RequestContext
    ) async throws -> T {
        var request = request
        let buffer = try await request.collectBody(upTo: 64 * 1024)
        guard buffer.readableBytes > 0 else {
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
extension ControlAPI.StopResult: ResponseEncodable {}
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
