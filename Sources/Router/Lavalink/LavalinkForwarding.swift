// In a cluster, a player's routes (`/v4/sessions/{sessionId}/players/{guildId}…`, the plugin's
// too) are answered by the pair that plays the guild: placed as any client's session is (given
// an owner when it has none), and forwarded there when it is another pair, whose answer streams
// back. That pair checks Lavalink's password itself.
import Hummingbird
import HTTPTypes
import ServiceSupport
import WireProtocol

struct LavalinkForwarding: RouterMiddleware {
    typealias Context = TonearmRequestContext
    let cluster: LavalinkCluster

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let guild = Self.guild(in: request.uri.path) else { return try await next(request, context) }
        do {
            switch try await cluster.relay.member.place(guild) {
            case .local:
                return try await next(request, context)
            case .remote(let address):
                guard request.headers[ClusterRelay.forwardedHeader] == nil else {
                    throw ClusterMember.unavailable("this guild is moving between pairs; try again in a moment")
                }
                return try await cluster.relay.forward(request, to: address)
            }
        } catch let error as APIError {
            return LavalinkJSON.error(status: error.status, message: error.message, path: request.uri.path, trace: nil)
        }
    }

    /// The guild a player's route names (nil: not a player's route, or not a guild id; the route
    /// itself answers that).
    static func guild(in path: String) -> SessionID? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 6, parts[1] == "v4", parts[2] == "sessions", parts[4] == "players", !parts[5].isEmpty,
            parts[5].utf8.count <= 20, parts[5].utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })
        else { return nil }
        return try? SessionID(String(parts[5]))
    }
}
