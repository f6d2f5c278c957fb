// The engine's HTTP control surface (loopback by default): plays and their controls, session
// state, yt-dlp resolution and search, health and metrics. The bodies it reads and writes are
// declared once, in EngineAPI, for the engine and the Router alike.
import EngineAPI
import Foundation
import Hummingbird
import NIOCore
import ServiceSupport
import WireProtocol

/// Builds the control routes over a `SessionManager`.
struct ControlAPI: Sendable {
    let manager: SessionManager
    let socket: AudioSocketServer
    let resolver: SourceResolver
    var searchPrefix = "ytsearch"
    let startedAt = Date()
    static let version = "0.2.0"

    func addRoutes(to router: Router<EngineRequestContext>) {
        let routes = RouteTable()
        router.add(middleware: APIErrorMiddleware(routes: routes))
        addSessionRoutes(to: router)
        addFenceRoutes(to: router)
        addLookupRoutes(to: router)
        addOperationsRoutes(to: router)
        routes.load(from: router)
    }

    /// The id in the path, percent-decoded exactly once (the Router escapes every byte that is
    /// not unreserved); a segment that is not valid percent-encoding is refused.
    static func sessionID(_ context: some RequestContext) throws(APIError) -> SessionID {
        guard let decoded = (context.parameters.get("id") ?? "").removingPercentEncoding else {
            throw .badRequest("invalid_session_id", "the session id in the path is not valid percent-encoding")
        }
        do {
            return try SessionID(decoded)
        } catch {
            throw .badRequest("invalid_session_id", error.description)
        }
    }

    /// The JSON body as `T`; an empty body is `empty` when given, else refused.
    static func decode<T: Decodable>(
        _ type: T.Type, _ request: Request, _ context: some RequestContext, empty: T? = nil, limit: Int = 64 * 1024
    ) async throws -> T {
        var request = request
        let buffer = try await request.collectBody(upTo: limit)
        guard buffer.readableBytesView.contains(where: { !" \r\n\t".utf8.contains($0) }) else {
            if let empty { return empty }
            throw APIError.badRequest("invalid_json", "the body is empty; send a JSON object")
        }
        let data = Data(buffer.readableBytesView)
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch let error as DecodingError where error.filterProblem != nil {
            // In the Router's words: the filter and the field named.
            throw APIError.badRequest("invalid_filters", error.filterProblem ?? "")
        } catch {
            if case DecodingError.dataCorrupted = error, let field = JSONCoding.fieldsBeyond64Bits(in: data).first {
                throw APIError.badRequest("invalid_json", "\"\(field)\" is out of range")
            }
            throw APIError.badRequest("invalid_json", "the body is not the expected JSON object: \(error)")
        }
    }
}
