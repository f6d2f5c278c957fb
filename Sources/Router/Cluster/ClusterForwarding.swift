// REST and `/listen` for a session another pair owns: forwarded, once the caller's token allows
// it, to the owner's Router, whose answer streams back (ClusterRelay.forward).
import Hummingbird
import HTTPTypes
import ServiceSupport
import WireProtocol

/// Forwards requests for sessions another pair owns (`/api/sessions/{id}…`, `/listen/{id}.ogg`)
/// once the caller's token allows it; everything else, and every session this pair owns, goes on.
struct ClusterForwarding: RouterMiddleware {
    typealias Context = TonearmRequestContext
    let relay: ClusterRelay
    let access: AccessControl

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let id = try Self.session(in: request.uri.path) else { return try await next(request, context) }
        if request.uri.path.hasPrefix("/api/") {
            try access.authorize(request, for: id)
        } else {
            try access.authorizeListening(request, for: id)
        }
        switch try await relay.member.place(id) {
        case .local:
            return try await next(request, context)
        case .remote(let address):
            guard request.headers[ClusterRelay.forwardedHeader] == nil else {
                throw APIError(
                    status: .serviceUnavailable, code: "cluster_unavailable",
                    message: "this session is moving between pairs; try again in a moment", retryAfterSeconds: 1)
            }
            return try await relay.forward(request, to: address)
        }
    }

    /// The session a path names, if it is one of a session's own routes.
    static func session(in path: String) throws(APIError) -> SessionID? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count >= 4, parts[1] == "api", parts[2] == "sessions", !parts[3].isEmpty {
            return try RouterApplication.sessionID(path: String(parts[3]))
        }
        if parts.count == 4, parts[1] == "hls", !parts[2].isEmpty {
            return try RouterApplication.sessionID(path: String(parts[2]))
        }
        if parts.count == 3, parts[1] == "listen", parts[2].hasSuffix(".ogg"), parts[2].count > 4 {
            return try RouterApplication.sessionID(path: String(parts[2].dropLast(4)))
        }
        return nil
    }
}
