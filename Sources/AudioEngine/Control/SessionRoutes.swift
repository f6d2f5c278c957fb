// `/session/{id}/…` and `/sessions`: a session's play and its controls.
import EngineAPI
import Foundation
import Hummingbird
import ServiceSupport

extension PlayStarted: ResponseEncodable {}
extension SessionInfo: ResponseEncodable {}
extension SessionList: ResponseEncodable {}
extension StopResult: ResponseEncodable {}
extension NextQueued: ResponseEncodable {}
extension HandOverPoint: ResponseEncodable {}
extension LayerStarted: ResponseEncodable {}
extension LayerStopped: ResponseEncodable {}

extension ControlAPI {
    func addSessionRoutes(to router: Router<some RequestContext>) {
        router.post("/session/:id/play") { request, context -> EditedResponse<PlayStarted> in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(PlayRequest.self, request, context)
            let started = try manager.play(
                sessionID: id, url: try Self.required(body.url), startMS: body.startMS ?? 0, volume: body.volume, filters: body.filters,
                normalize: body.normalize, startAtMS: body.startAtMS, cue: body.cue)
            return EditedResponse(status: .accepted, response: started)
        }
        router.post("/session/:id/handover") { request, context -> HandOverPoint in
            let id = try Self.sessionID(context)
            guard let at = try await Self.decode(HandOverRequest.self, request, context).atMS else {
                throw APIError.badRequest("invalid_time", "the body needs \"at_ms\": wall-clock milliseconds since 1970")
            }
            return try manager.handOver(sessionID: id, atMS: at)
        }
        router.post("/session/:id/next") { request, context -> EditedResponse<NextQueued> in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(NextRequest.self, request, context)
            let queued = try manager.setNext(sessionID: id, url: try Self.required(body.url), crossfadeMS: body.crossfadeMS ?? 0)
            return EditedResponse(status: .accepted, response: queued)
        }
        router.post("/session/:id/layers") { request, context -> EditedResponse<LayerStarted> in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(LayerRequest.self, request, context)
            return EditedResponse(status: .accepted, response: try manager.addLayer(sessionID: id, body))
        }
        router.delete("/session/:id/layers/:layer") { _, context -> LayerStopped in
            let id = try Self.sessionID(context)
            guard let text = context.parameters.get("layer"), let layer = UInt64(text) else {
                throw APIError.badRequest("invalid_layer_id", "a layer id is the number its layer request answered")
            }
            return try manager.removeLayer(sessionID: id, layerID: layer)
        }
        router.delete("/session/:id/next") { _, context -> NextQueued in
            try manager.cancelNext(sessionID: try Self.sessionID(context))
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
            guard let volume = try await Self.decode(VolumeRequest.self, request, context).volume else {
                throw APIError.badRequest("invalid_volume", "the body needs \"volume\": a percentage from 0 to 1000")
            }
            return try manager.setVolume(sessionID: id, volume: volume)
        }
        router.post("/session/:id/filters") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let filters = try await Self.decode(Filters.self, request, context)
            return try manager.setFilters(sessionID: id, filters: filters)
        }
        router.post("/session/:id/normalize") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            guard let enabled = try await Self.decode(NormalizeRequest.self, request, context).enabled else {
                throw APIError.badRequest("invalid_normalize", "the body needs \"enabled\": true or false")
            }
            return try manager.setNormalize(sessionID: id, enabled: enabled)
        }
        router.post("/session/:id/cue") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            guard let enabled = try await Self.decode(NormalizeRequest.self, request, context).enabled else {
                throw APIError.badRequest("invalid_cue", "the body needs \"enabled\": true or false")
            }
            return try manager.setCue(sessionID: id, enabled: enabled)
        }
        router.post("/session/:id/seek") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(SeekRequest.self, request, context)
            guard let position = body.positionMS else {
                throw APIError.badRequest("invalid_position", "the body needs \"position_ms\": milliseconds from the start")
            }
            return try manager.seek(sessionID: id, positionMS: position, playID: body.playID)
        }
        router.post("/session/:id/end_at") { request, context -> SessionInfo in
            let id = try Self.sessionID(context)
            let body = try await Self.decode(SeekRequest.self, request, context)
            if let position = body.positionMS, position <= 0 {
                throw APIError.badRequest("invalid_position", "\"position_ms\" is where the play ends, above 0 ms (or none)")
            }
            return try manager.endAt(sessionID: id, positionMS: body.positionMS, playID: body.playID)
        }
        router.get("/session/:id") { _, context -> SessionInfo in
            try manager.info(sessionID: try Self.sessionID(context))
        }
        router.get("/sessions") { _, _ -> SessionList in
            SessionList(sessions: manager.list())
        }
    }

    /// A request's `url`, which must be there and not blank.
    private static func required(_ url: String?) throws(APIError) -> String {
        guard let url, !url.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .badRequest("missing_url", "the body needs \"url\": an http(s) URL or a file name inside the media directory")
        }
        return url
    }
}
