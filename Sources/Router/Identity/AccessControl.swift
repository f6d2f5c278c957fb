// Who may hear and control which session: a browser token names exactly one session; the bot
// token may use any (guild) session. Tokens come as `Authorization: Bearer …` or `?token=` (for
// clients that cannot set headers, such as <audio> elements).
import Hummingbird
import HTTPTypes
import ServiceSupport
import WireProtocol

/// Checks requests against identity tokens and the bot token.
struct AccessControl: Sendable {
    let tokens: IdentityTokens
    let botToken: String?

    /// Throws 401 without a valid token, 403 when the token is for another session.
    func authorize(_ request: Request, for session: SessionID) throws(APIError) {
        try authorize(token: Self.token(in: request), for: session)
    }

    /// `authorize` for a token already taken from its request.
    func authorize(token: String?, for session: SessionID) throws(APIError) {
        guard let token else {
            throw APIError(
                status: .unauthorized, code: "unauthorized",
                message: "a token is required: get one from POST /api/identity and send it as ?token= or Authorization: Bearer")
        }
        if let botToken, Self.constantTimeEqual(token, botToken) { return }
        guard let granted = tokens.verify(token) else {
            if tokens.verifyListen(token) != nil { throw Self.onlyListens }
            throw APIError(status: .unauthorized, code: "unauthorized", message: "the token is not valid")
        }
        guard granted == session else {
            throw APIError(status: .forbidden, code: "forbidden", message: "this token belongs to another session")
        }
    }

    /// Hearing a session (`/listen`, `/hls`): what may control it, or its listen token.
    func authorizeListening(_ request: Request, for session: SessionID) throws(APIError) {
        try authorizeListening(token: Self.token(in: request), for: session)
    }

    /// `authorizeListening` for a token already taken from its request (`HLSFastPath`).
    func authorizeListening(token: String?, for session: SessionID) throws(APIError) {
        if let token, let granted = tokens.verifyListen(token) {
            guard granted == session else {
                throw APIError(status: .forbidden, code: "forbidden", message: "this listen token is for another session")
            }
            return
        }
        try authorize(token: token, for: session)
    }

    /// A `follow` needs the right to hear its station too: the caller's own token (the bot
    /// token, or a browser's for that session), or the station's listen token given as the
    /// command's `token`. Other commands pass.
    func authorizeFollowing(_ command: SessionCommand, token: String?, callerToken: String?) throws(APIError) {
        guard case .follow(let station) = command else { return }
        if let callerToken, let botToken, Self.constantTimeEqual(callerToken, botToken) { return }
        guard token != nil || callerToken != nil else {
            throw APIError(status: .unauthorized, code: "unauthorized", message: "following \(station) needs a token that may hear it")
        }
        do {
            try authorizeListening(token: token ?? callerToken, for: station)
        } catch {
            throw APIError(
                status: .forbidden, code: "station_forbidden",
                message: "following \(station) needs a token that may hear it: give its listen token as \"token\" (\(error.message))")
        }
    }

    private static let onlyListens = APIError(
        status: .forbidden, code: "forbidden",
        message: "a listen token may only hear its session (/listen, /hls), not control it")

    /// Whether the request carries the bot token (bots are not held to the browsers' share).
    func isBot(_ request: Request) -> Bool { isBot(token: Self.token(in: request)) }

    func isBot(token: String?) -> Bool {
        guard let botToken, let token else { return false }
        return Self.constantTimeEqual(token, botToken)
    }

    /// Any valid token (a browser's or the bot token), for calls that belong to no session;
    /// answers a browser token's own session (nil for the bot).
    @discardableResult
    func anyone(_ request: Request) throws(APIError) -> SessionID? {
        guard let token = Self.token(in: request) else {
            throw APIError(
                status: .unauthorized, code: "unauthorized",
                message: "a token is required: get one from POST /api/identity and send it as ?token= or Authorization: Bearer")
        }
        if let botToken, Self.constantTimeEqual(token, botToken) { return nil }
        guard let session = tokens.verify(token) else {
            if tokens.verifyListen(token) != nil { throw Self.onlyListens }
            throw APIError(status: .unauthorized, code: "unauthorized", message: "the token is not valid")
        }
        return session
    }

    /// A bot connection: the bot token is required, whatever the session.
    func bot(_ request: Request) throws(APIError) -> SessionID {
        let id = try RouterApplication.sessionID(query: RouterApplication.formQueryValue("guild", in: request))
        try requireBot(request)
        return id
    }

    /// Only the bot token passes (401 without a valid token, 403 with a browser's).
    func requireBot(_ request: Request) throws(APIError) { try requireBot(token: Self.token(in: request)) }

    /// `requireBot` for a token already taken from its request (a relayed client's command).
    func requireBot(token: String?) throws(APIError) {
        guard let token else {
            throw APIError(status: .unauthorized, code: "unauthorized", message: "the bot token is required (Authorization: Bearer or ?token=)")
        }
        if let botToken, Self.constantTimeEqual(token, botToken) { return }
        if tokens.verify(token) != nil {
            throw APIError(status: .forbidden, code: "forbidden", message: "only the bot token may do this")
        }
        throw APIError(status: .unauthorized, code: "unauthorized", message: "the token is not valid")
    }

    /// The session a WebSocket subscribes to: the one a browser token names, or with the bot
    /// token the `session` query parameter (a guild id). A token that is neither is refused as
    /// such (401), whatever else the request lacks: a browser must learn that its stored token
    /// is no longer good, not that a parameter it never sends is missing.
    func webSocketSession(_ request: Request) throws(APIError) -> SessionID {
        let named = RouterApplication.formQueryValue("session", in: request)
        if named == nil, let token = Self.token(in: request) {
            if let granted = tokens.verify(token) { return granted }
            if tokens.verifyListen(token) != nil { throw Self.onlyListens }
            guard isBot(request) else {
                throw APIError(status: .unauthorized, code: "unauthorized", message: "the token is not valid")
            }
        }
        let id = try RouterApplication.sessionID(query: named)
        try authorize(request, for: id)
        return id
    }

    static func token(in request: Request) -> String? {
        token(authorization: request.headers[.authorization], query: request.uri.queryParameters["token"])
    }

    /// The token of `Authorization: Bearer …`, else of `?token=` (already percent-decoded).
    static func token(authorization: String?, query: Substring?) -> String? {
        if let authorization, authorization.hasPrefix("Bearer ") {
            return String(authorization.dropFirst("Bearer ".count))
        }
        return query.map(String.init).flatMap { $0.isEmpty ? nil : $0 }
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

extension Identity: ResponseEncodable {}
