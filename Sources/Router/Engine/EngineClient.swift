// Calls the engine's HTTP control API. An engine refusal (its JSON error) becomes the same error
// for the Router's caller; an unreachable engine becomes 503 `engine_unavailable`.
import AsyncHTTPClient
import EngineAPI
import Foundation
import HTTPTypes
import NIOCore
import NIOHTTP1
import ServiceSupport
import WireProtocol

extension EngineLink {
    /// Fails fast while the socket link is down, instead of waiting on the engine's control port
    /// (AsyncHTTPClient retries a refused connection until the request's deadline).
    func requireConnected(_ engine: EngineClient) throws(APIError) {
        guard status.connected else { throw EngineClient.unavailable(engine.baseURL) }
    }
}

/// What a session controller asks of the engine. `EngineClient` is the real one; unit tests of
/// the queue wiring give a scripted one.
protocol EngineControl: Sendable {
    /// Starts `url` on the session, replacing its current play; answers the engine's play id.
    /// With `startAtMS` (wall-clock ms) its first frame goes out then, not before (a hand-over).
    func play(
        _ id: SessionID, url: String, startMS: Int64?, startAtMS: Int64?, volume: Int, filters: Filters, normalize: Bool,
        cue: Bool
    ) async throws(APIError) -> UInt64
    /// Schedules the session's play to end at wall-clock `atMS`, where another pair's engine
    /// takes it over; answers the position that engine starts at.
    func handOver(_ id: SessionID, atMS: Int64) async throws(APIError) -> HandOverPoint
    /// A control of the session's current play (the engine refuses one for a replaced play).
    func control(_ id: SessionID, _ control: SessionControl) async throws(APIError)
    /// Asks for `url` to follow the session's play (gapless, or over a crossfade); answers the
    /// next play's id. nil `url` calls off the one asked before.
    func next(_ id: SessionID, url: String?, crossfadeMS: Int) async throws(APIError) -> UInt64?
    /// Title, duration and playlist entries of a URL (422 when it cannot be played), resolved for
    /// session `owner` (which the engine lets hold one place for resolving at a time). A
    /// cancelled caller ends the request, and the engine calls the resolution off.
    func resolve(_ url: String, owner: SessionID?) async throws(APIError) -> Resolution
    /// The plays the engine is running now: session → play id.
    func activePlays() async throws -> [SessionID: UInt64]
}

/// An engine answer: status and JSON body.
struct EngineReply: Sendable {
    var status: Int
    var body: ByteBuffer
    /// The engine's `Retry-After` (seconds), passed on to the caller of a limited request.
    var retryAfterSeconds: Int? = nil
}

/// The engine's control API, as the Router uses it.
struct EngineClient: EngineControl {
    let baseURL: String
    let http: HTTPClient

    init(baseURL: String, http: HTTPClient = .shared) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.http = http
    }

    func play(
        _ id: SessionID, url: String, startMS: Int64?, startAtMS: Int64?, volume: Int, filters: Filters, normalize: Bool,
        cue: Bool
    ) async throws(APIError) -> UInt64 {
        let body = Self.json(
            PlayRequest(
                url: url, startMS: startMS, volume: volume, filters: filters, normalize: normalize, startAtMS: startAtMS, cue: cue))
        let reply = try await send(.POST, "/session/\(Self.segment(id))/play", body: body)
        return try Self.decode(PlayStarted.self, reply).playID
    }

    func handOver(_ id: SessionID, atMS: Int64) async throws(APIError) -> HandOverPoint {
        let reply = try await send(.POST, "/session/\(Self.segment(id))/handover", body: Self.json(HandOverRequest(atMS: atMS)))
        return try Self.decode(HandOverPoint.self, reply)
    }

    func control(_ id: SessionID, _ control: SessionControl) async throws(APIError) {
        let reply = try await send(.POST, "/session/\(Self.segment(id))/\(control.name)", body: control.body.map { Self.json($0) })
        _ = try Self.decode(Ignored.self, reply)
    }

    func next(_ id: SessionID, url: String?, crossfadeMS: Int) async throws(APIError) -> UInt64? {
        guard let url else {
            _ = try Self.decode(Ignored.self, try await send(.DELETE, "/session/\(Self.segment(id))/next", body: nil))
            return nil
        }
        let body = Self.json(NextRequest(url: url, crossfadeMS: crossfadeMS))
        return try Self.decode(NextQueued.self, try await send(.POST, "/session/\(Self.segment(id))/next", body: body)).playID
    }

    /// Mixes a layer over the session's play (engine-api.md, "Layers").
    func addLayer(_ id: SessionID, _ request: LayerRequest) async throws(APIError) -> LayerStarted {
        try Self.decode(LayerStarted.self, try await send(.POST, "/session/\(Self.segment(id))/layers", body: Self.json(request)))
    }

    /// Sets what the engine may play (a cluster pair's fence, engine-api.md "Fence").
    func fence(_ fence: Fence, timeout: TimeAmount) async throws(APIError) -> FenceState {
        let reply = try await send(.PUT, "/fence", body: Self.json(fence), timeout: timeout)
        return try Self.decode(FenceState.self, reply)
    }

    /// Ends a layer of the session's play.
    func removeLayer(_ id: SessionID, layerID: UInt64) async throws(APIError) -> LayerStopped {
        try Self.decode(LayerStopped.self, try await send(.DELETE, "/session/\(Self.segment(id))/layers/\(layerID)", body: nil))
    }

    func resolve(_ url: String, owner: SessionID?) async throws(APIError) -> Resolution {
        let path = "/resolve?url=\(Self.query(url))" + Self.ownerQuery(owner)
        return try Self.decode(Resolution.self, try await send(.GET, path, body: nil, timeout: .seconds(60)))
    }

    /// The engine's `/search` answer, passed on as it is; for a browser, its session is the owner.
    func search(_ query: String, limit: Int?, owner: SessionID?, source: String? = nil) async throws(APIError) -> EngineReply {
        var path = "/search?q=\(Self.query(query))" + Self.ownerQuery(owner)
        if let limit { path += "&limit=\(limit)" }
        if let source { path += "&source=\(Self.query(source))" }
        let reply = try await send(.GET, path, body: nil, timeout: .seconds(60))
        _ = try Self.decode(Ignored.self, reply)
        return reply
    }

    /// The engine's sessions with a play in progress: id → play id.
    func activePlays() async throws -> [SessionID: UInt64] {
        let response = try await http.execute(HTTPClientRequest(url: baseURL + "/sessions"), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 4 << 20)
        let listing = try JSONDecoder().decode(SessionList.self, from: Data(body.readableBytesView))
        var plays: [SessionID: UInt64] = [:]
        for session in listing.sessions where session.state.isActive {
            plays[session.sessionID] = session.playID
        }
        return plays
    }

    /// Every engine session's frame counters now (`GET /sessions`), for Lavalink's `frameStats`.
    func frameCounters() async throws -> FrameStats.Reading {
        let response = try await http.execute(HTTPClientRequest(url: baseURL + "/sessions"), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 4 << 20)
        let listing = try JSONDecoder().decode(SessionList.self, from: Data(body.readableBytesView))
        return FrameStats.Reading(
            at: .now, frames: Dictionary(listing.sessions.map { ($0.sessionID, $0.frames) }, uniquingKeysWith: { first, _ in first }))
    }

    private struct Ignored: Decodable {}

    /// A request body as JSON bytes.
    private static func json(_ body: some Encodable) -> ByteBuffer {
        ByteBuffer(bytes: (try? JSONCoding.encoder.encode(body)) ?? Data())
    }

    private func send(_ method: HTTPMethod, _ path: String, body: ByteBuffer?, timeout: TimeAmount = .seconds(10))
        async throws(APIError) -> EngineReply
    {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(body)
        }
        do {
            let response = try await http.execute(request, timeout: timeout)
            let bytes = try await response.body.collect(upTo: 4 << 20)
            return EngineReply(
                status: Int(response.status.code), body: bytes,
                retryAfterSeconds: response.headers.first(name: "Retry-After").flatMap { Int($0) })
        } catch {
            if Task.isCancelled { throw .cancelled }
            throw Self.unavailable(baseURL)
        }
    }

    /// A 2xx answer decoded as `T`; any other status becomes the engine's own error.
    private static func decode<T: Decodable>(_ type: T.Type, _ reply: EngineReply) throws(APIError) -> T {
        let data = Data(reply.body.readableBytesView)
        guard (200..<300).contains(reply.status) else {
            let body = try? JSONDecoder().decode(ErrorBody.self, from: data)
            if body?.code == "engine_full" {
                throw APIError(
                    status: .serviceUnavailable, code: "engine_full",
                    message: "this server is playing as much as it can carry right now; try again in "
                        + "\(reply.retryAfterSeconds ?? 5) s (the audio engine: \(body?.message ?? "full"))",
                    retryAfterSeconds: reply.retryAfterSeconds ?? 5)
            }
            throw APIError(
                status: .init(code: reply.status), code: body?.code ?? "engine_error",
                message: body?.message ?? "the audio engine answered \(reply.status)", retryAfterSeconds: reply.retryAfterSeconds)
        }
        do {
            return try JSONDecoder().decode(T.self, from: data)
        } catch {
            throw APIError(status: .badGateway, code: "engine_error", message: "the audio engine's answer was not understood: \(error)")
        }
    }

    /// A session id as one path segment: every byte but the unreserved ones (RFC 3986) escaped,
    /// so `/`, `?`, `#` and `%` in a guild id reach the engine as themselves.
    static func segment(_ id: SessionID) -> String {
        let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
        return id.description.addingPercentEncoding(withAllowedCharacters: unreserved) ?? id.description
    }

    /// `&session=` naming who a lookup is for, or nothing for the operator's own (the bot token).
    private static func ownerQuery(_ owner: SessionID?) -> String {
        owner.map { "&session=\(query($0.description))" } ?? ""
    }

    private static func query(_ value: String) -> String {
        var allowed = CharacterSet.urlQueryAllowed
        allowed.remove(charactersIn: "&=+?#")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }

    static func unavailable(_ baseURL: String) -> APIError {
        APIError(
            status: .serviceUnavailable, code: "engine_unavailable",
            message: "the audio engine is not reachable at the moment (\(baseURL)); try again shortly")
    }
}
