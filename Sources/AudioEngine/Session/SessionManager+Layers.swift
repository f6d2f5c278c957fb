// Sounds laid over a session's play (engine-api.md "Layers"): started with their own source,
// mixed in by the play's worker, ended by themselves, on request, or with the play.
import EngineAPI
import Foundation
import HTTPTypes
import Logging
import ServiceSupport
import Synchronization
import WireProtocol

extension SessionManager {
    /// Mixes `request`'s source over the session's play from its next frame encoded, the track
    /// ducked under it; it ends by itself, on `removeLayer`, or with the play.
    func addLayer(sessionID: SessionID, _ request: LayerRequest) throws(APIError) -> LayerStarted {
        if let problem = request.problem { throw .badRequest(problem.code, problem.message) }
        guard let url = request.url, !url.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .badRequest("missing_url", "the body needs \"url\": an http(s) URL or a file name inside the media directory")
        }
        let plan = try resolver.plan(url)
        var ready: ResolvedSource?
        if case .ready(let source) = plan { ready = source }
        let (playback, ask, playID) = try state.withLock { state throws(APIError) -> (Playback, LayerAsk, UInt64) in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            guard let playback = session.playback, let playID = session.machine.playID else {
                throw APIError(
                    status: .conflict, code: "nothing_playing", message: "session \"\(sessionID)\" plays nothing to lay a sound over")
            }
            guard session.layers.count < LayerRequest.maxLayers else {
                throw APIError(
                    status: .conflict, code: "too_many_layers",
                    message: "a play carries at most \(LayerRequest.maxLayers) layers at once; end one first")
            }
            // A layer must fit in the CPU budget too; over a passed-through play it makes the play transcode.
            let counts = Self.playCounts(state)
            let overPassthrough = session.passthrough && session.playStarted && session.layers.isEmpty
            try load.admit(
                transcoding: counts.transcoding, passthrough: counts.passthrough, layers: counts.layers,
                adding: .layer(overPassthrough: overPassthrough), now: Self.monotonicSeconds())
            let ask = LayerAsk(
                layerID: state.nextPlayID, url: url, source: ready, volume: request.volume ?? 100,
                duckDB: request.duckDB ?? LayerRequest.defaultDuckDB, attackMS: request.attackMS ?? LayerRequest.defaultAttackMS,
                releaseMS: request.releaseMS ?? LayerRequest.defaultReleaseMS)
            state.nextPlayID += 1
            session.layers.append((ask.layerID, playID))
            state.sessions[sessionID] = session
            playback.addLayer(ask)
            return (playback, ask, playID)
        }
        logger.info("layer", metadata: ["session.id": "\(sessionID)", "layer.id": "\(ask.layerID)", "url": "\(url)"])
        if case .page(let page) = plan {
            let layerID = ask.layerID
            background.spawn(owner: ask.cancellation) { [resolver] in
                do {
                    playback.provideLayer(try await resolver.resolvePage(page, owner: sessionID.description), layerID: layerID)
                } catch {
                    playback.failLayer(layerID, error)
                }
            }
        }
        return LayerStarted(
            sessionID: sessionID, playID: playID, layerID: ask.layerID, volume: ask.volume, duckDB: ask.duckDB,
            attackMS: ask.attackMS, releaseMS: ask.releaseMS)
    }

    /// Ends a layer now (`layer_ended`/`stopped`): the frames encoded ahead still carry it, no more.
    func removeLayer(sessionID: SessionID, layerID: UInt64) throws(APIError) -> LayerStopped {
        try state.withLock { state throws(APIError) -> LayerStopped in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            guard let ended = session.endLayer(layerID, sessionID, reason: .stopped) else {
                throw APIError(
                    status: .notFound, code: "layer_not_found", message: "no layer \(layerID) is playing on session \"\(sessionID)\"")
            }
            session.playback?.removeLayer(layerID)
            state.pendingEvents.append(ended)
            state.sessions[sessionID] = session
            return LayerStopped(sessionID: sessionID, layerID: layerID, stopped: true)
        }
    }
}
