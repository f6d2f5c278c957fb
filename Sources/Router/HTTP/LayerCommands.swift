// Layers over a session's play, however they are asked for — `POST /api/sessions/{id}/layers`,
// `DELETE /api/sessions/{id}/layers/{layer_id}`, or the WebSocket ops `layer` and `layer_stop`:
// checked here, carried out by the engine (which mixes them into the session's own stream). A
// layer is a moment's sound, not part of the queue: nothing of it is stored.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import WireProtocol

struct LayerCommands: Sendable {
    let directory: SessionDirectory
    let link: EngineLink
    let engine: EngineClient

    /// Mixes `request`'s source over the session's play; answers the layer's id and settings.
    func add(_ request: LayerRequest, on id: SessionID) async throws(APIError) -> LayerStarted {
        if let problem = request.problem { throw .badRequest(problem.code, problem.message) }
        guard let url = request.url, !url.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .badRequest("missing_url", "url is required: an http(s) link, a page yt-dlp understands, or a file name")
        }
        try link.requireConnected(engine)
        if let station = directory.store.station(of: id) {
            throw APIError(
                status: .conflict, code: "following", message: "this session follows \(station): a layer goes on the station, or unfollow first")
        }
        return try await onSession(id) { [engine] controller in
            // The engine knows no session that never played: the Router says what the user sees.
            guard await controller.activePlayID != nil else {
                throw APIError(status: .conflict, code: "nothing_playing", message: "nothing plays on \"\(id)\" to lay a sound over")
            }
            return try await engine.addLayer(id, request)
        }
    }

    /// Ends a layer now.
    func remove(_ layerID: UInt64, on id: SessionID) async throws(APIError) -> LayerStopped {
        try link.requireConnected(engine)
        return try await onSession(id) { [engine] controller in
            // Nothing plays, or the engine knows no such session: no layer of it can be playing.
            let notFound = APIError(
                status: .notFound, code: "layer_not_found", message: "no layer \(layerID) is playing on \"\(id)\"")
            guard await controller.activePlayID != nil else { throw notFound }
            do {
                return try await engine.removeLayer(id, layerID: layerID)
            } catch let error as APIError where error.code == "session_not_found" {
                throw notFound
            }
        }
    }

    /// Runs `call` with the session pinned on this Router (as every command is).
    private func onSession<T: Sendable>(_ id: SessionID, _ call: @escaping @Sendable (SessionController) async throws -> T) async throws(APIError) -> T {
        do {
            return try await directory.using(id) { try await call($0) }
        } catch let error as APIError {
            throw error
        } catch {
            throw .internalError
        }
    }

    /// A layer request from a JSON body (a WebSocket message's other keys are ignored).
    static func request(_ data: Data) throws(APIError) -> LayerRequest {
        do {
            return try JSONDecoder().decode(LayerRequest.self, from: data)
        } catch let DecodingError.typeMismatch(_, context) where !context.codingPath.isEmpty {
            let field = context.codingPath[0].stringValue
            throw .badRequest("invalid_\(field)", "\(field) has the wrong type: \(context.debugDescription)")
        } catch {
            throw .badRequest(
                "invalid_json", "a layer is a JSON object such as {\"url\":\"…\",\"volume\":100,\"duck_db\":12}")
        }
    }

    /// A layer id from a path segment or a WebSocket message's `layer_id`.
    static func layerID(_ value: UInt64?) throws(APIError) -> UInt64 {
        guard let value else {
            throw .badRequest("invalid_layer_id", "layer_id is required: the number the layer request answered")
        }
        return value
    }

    /// `{"layer_id": N}` of a WebSocket `layer_stop`.
    struct Stop: Decodable {
        var layer_id: UInt64?
    }

    static func stop(_ data: Data) throws(APIError) -> UInt64 {
        guard let stop = try? JSONDecoder().decode(Stop.self, from: data) else {
            throw .badRequest("invalid_layer_id", "layer_id is the number the layer request answered")
        }
        return try layerID(stop.layer_id)
    }
}
