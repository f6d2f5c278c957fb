// The Router's routes through Hummingbird's test client, with a real store, directory and access
// control but no engine: who may do what, the error shape and status of each refusal, and that a
// command needing the engine says so at once while its link is down.
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import TonearmRouter

@Suite struct RouterRoutesTests {
    static let botToken = "bot-token-for-tests"

    /// The Router's real routes over a real store, directory and access control, with no engine
    /// (its link stays down) and the page's folder from the source tree.
    static func makeRouter() -> Router<TonearmRequestContext> {
        let store = SessionStore()
        let logger = Logger(label: "test")
        let api = RouterApplication(
            store: store,
            directory: SessionDirectory(store: store, engine: ScriptedEngine(), database: nil, writer: nil, logger: logger),
            link: EngineLink(path: "/nonexistent/engine.sock", store: store, logger: logger),
            engine: EngineClient(baseURL: "http://127.0.0.1:1"),
            access: AccessControl(
                tokens: IdentityTokens(secret: Data("a test secret of enough length!!".utf8)), botToken: botToken))
        return api.makeRouter(publicDirectory: OpenAPIDocumentTests.publicDirectory)
    }

    func withRouter(_ body: @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        try await Application(router: Self.makeRouter()).test(.live, body)
    }

    static func json(_ response: TestResponse) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:]
    }

    static func code(_ response: TestResponse) -> String? {
        (json(response)["error"] as? [String: Any])?["code"] as? String
    }

    static func bearer(_ token: String) -> HTTPFields { [.authorization: "Bearer \(token)"] }

    @Test func anIdentityOpensItsOwnSessionAndNoOther() async throws {
        try await withRouter { client in
            let mine = try await client.execute(uri: "/api/identity", method: .post) { Self.json($0) }
            let theirs = try await client.execute(uri: "/api/identity", method: .post) { Self.json($0) }
            let token = try #require(mine["token"] as? String)
            let session = try #require(mine["session_id"] as? String)
            let other = try #require(theirs["session_id"] as? String)
            #expect(session != other)
            try await client.execute(uri: "/api/sessions/\(session)", method: .get, headers: Self.bearer(token)) { response in
                #expect(response.status == .ok)
                #expect(Self.json(response)["status"] as? String == "idle")
            }
            // The same token in the query, as sockets and <audio> send it.
            try await client.execute(uri: "/api/sessions/\(session)?token=\(token)", method: .get) { #expect($0.status == .ok) }
            try await client.execute(uri: "/api/sessions/\(other)", method: .get, headers: Self.bearer(token)) { response in
                #expect(response.status == .forbidden && Self.code(response) == "forbidden")
            }
            try await client.execute(uri: "/api/sessions/\(session)", method: .get) { response in
                #expect(response.status == .unauthorized && Self.code(response) == "unauthorized")
            }
            try await client.execute(uri: "/api/sessions/\(session)", method: .get, headers: Self.bearer("v1.\(session).forged")) {
                #expect($0.status == .unauthorized)
            }
            // A WebSocket's token that is no longer good is said to be so (a browser then drops it),
            // not that the session parameter only the bot sends is missing.
            try await client.execute(uri: "/ws?token=v1.\(session).forged", method: .get) { response in
                #expect(response.status == .unauthorized && Self.code(response) == "unauthorized")
            }
            try await client.execute(uri: "/ws", method: .get, headers: Self.bearer(Self.botToken)) { response in
                #expect(response.status == .badRequest && Self.code(response) == "invalid_session_id")
            }
            // The operators' listing is the bot token's alone.
            try await client.execute(uri: "/api/sessions", method: .get, headers: Self.bearer(token)) { #expect($0.status == .forbidden) }
            try await client.execute(uri: "/api/sessions", method: .get, headers: Self.bearer(Self.botToken)) {
                #expect($0.status == .ok)
            }
        }
    }

    @Test func refusalsHaveTheirStatusAndCode() async throws {
        try await withRouter { client in
            let bot = Self.bearer(Self.botToken)
            let cases: [(HTTPRequest.Method, String, String?, HTTPResponse.Status, String)] = [
                (.post, "/api/sessions/g/dance", nil, .notFound, "unknown_command"),
                (.post, "/api/sessions/g/jump", #"{"index":-1}"#, .badRequest, "invalid_index"),
                (.post, "/api/sessions/g/seek", #"{"position_ms":1e300}"#, .badRequest, "invalid_position"),
                (.post, "/api/sessions/g/queue", "{}", .badRequest, "missing_url"),
                (.post, "/api/sessions/\(String(repeating: "x", count: 25))/stop", nil, .badRequest, "invalid_session_id"),
                (.delete, "/api/sessions/g/queue/x", nil, .badRequest, "invalid_index"),
                (.get, "/api/sessions/g/seek", nil, .methodNotAllowed, "method_not_allowed"),
                (.get, "/ws?session=g", nil, .upgradeRequired, "websocket_required"),
                (.get, "/api/search", nil, .badRequest, "missing_query"),
                // Well formed, but the engine link is down: said at once, not after a timeout.
                (.post, "/api/sessions/g/play", #"{"url":"tone.mp3"}"#, .serviceUnavailable, "engine_unavailable"),
                (.get, "/nowhere", nil, .notFound, "not_found"),
            ]
            for (method, uri, body, status, code) in cases {
                try await client.execute(uri: uri, method: method, headers: bot, body: body.map { ByteBuffer(string: $0) }) {
                    response in
                    #expect(response.status == status, "\(method) \(uri)")
                    #expect(Self.code(response) == code, "\(method) \(uri): \(String(buffer: response.body))")
                    #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
                }
            }
            try await client.execute(uri: "/api/sessions/g/seek", method: .get, headers: bot) { response in
                #expect(response.headers[.allow] == "POST")
            }
        }
    }

    /// A query's `+` is a space, as forms and URL encoders write one: `?guild=+S` names the id
    /// " S", which no session may have (400 before any upgrade), and a plus is `%2B`.
    @Test func aPlusInAQueryIdIsASpace() async throws {
        try await withRouter { client in
            let bot = Self.bearer(Self.botToken)
            let cases: [(String, HTTPResponse.Status, String)] = [
                ("/bot?guild=+S", .badRequest, "invalid_session_id"),
                ("/ws?session=a+b", .badRequest, "invalid_session_id"),
                ("/bot?guild=%2BS", .upgradeRequired, "websocket_required"),
                ("/bot?guild=123456789012345678", .upgradeRequired, "websocket_required"),
            ]
            for (uri, status, code) in cases {
                try await client.execute(uri: uri, method: .get, headers: bot) { response in
                    #expect(response.status == status && Self.code(response) == code, "\(uri): \(String(buffer: response.body))")
                }
            }
        }
    }

    @Test func theDocumentIsServedAsJSON() async throws {
        try await withRouter { client in
            try await client.execute(uri: "/openapi.json", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("application/json") == true)
                #expect(Self.json(response)["openapi"] as? String == "3.1.0")
            }
        }
    }
}
