// Calls the engine's HTTP control API. The engine's answers (including its JSON errors) are
// passed on to the Router's caller unchanged; an unreachable engine becomes 503.
import AsyncHTTPClient
import HTTPTypes
import Foundation
import NIOCore
import NIOHTTP1
import WireProtocol

/// An engine answer: status and JSON body.
struct EngineReply: Sendable {
    var status: Int
    var body: ByteBuffer
}

/// The engine's control API, as the Router uses it.
struct EngineClient: Sendable {
    let baseURL: String
    let http: HTTPClient

    init(baseURL: String, http: HTTPClient = .shared) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.http = http
    }

    func play(_ id: SessionID, body: ByteBuffer) async throws(APIError) -> EngineReply {
        try await post("/session/\(id)/play", body: body)
    }

    func stop(_ id: SessionID) async throws(APIError) -> EngineReply {
        try await post("/session/\(id)/stop", body: nil)
    }

    /// The engine's sessions with a play in progress: id → play id.
    func activePlays() async throws -> [SessionID: UInt64] {
        let response = try await http.execute(HTTPClientRequest(url: baseURL + "/sessions"), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 4 << 20)
        struct Listing: Decodable {
            struct Session: Decodable {
                var session_id: SessionID
                var state: String
                var play_id: UInt64?
            }
            var sessions: [Session]
        }
        let listing = try JSONDecoder().decode(Listing.self, from: Data(body.readableBytesView))
        var plays: [SessionID: UInt64] = [:]
        for session in listing.sessions where ["extracting", "streaming", "paused"].contains(session.state) {
            plays[session.session_id] = session.play_id
        }
        return plays
    }

    private func post(_ path: String, body: ByteBuffer?) async throws(APIError) -> EngineReply {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        if let body { request.body = .bytes(body) }
        do {
            let response = try await http.execute(request, timeout: .seconds(5))
            let bytes = try await response.body.collect(upTo: 1 << 20)
            return EngineReply(status: Int(response.status.code), body: bytes)
        } catch {
            throw Self.unavailable(baseURL)
        }
    }

    static func unavailable(_ baseURL: String) -> APIError {
        APIError(
            status: .serviceUnavailable, code: "engine_unavailable",
            message: "the audio engine is not reachable at the moment (\(baseURL)); try again shortly")
    }
}
