// A Lavalink player: one guild of one Lavalink session, played by the Tonearm session of the same
// id. It is a text-only client of that session (`ClientKind.lavalink`): the session's events come
// to it in order and leave as Lavalink's (`LavalinkPlayer.translate`, a pure function):
//   ready → TrackStartEvent; finished → TrackEndEvent (finished, stopped, replaced, cleanup; an
//   error → loadFailed); error → TrackExceptionEvent (and TrackEndEvent loadFailed for a track that
//   never started); stuck → TrackStuckEvent; voice_state disconnected → WebSocketClosedEvent with
//   Discord's code.
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import WireProtocol

final class LavalinkPlayer: ClientSink {
    let guild: SessionID
    let eventLoop: any EventLoop
    private let session: WeakSession
    let state: Mutex<Tracks>
    /// The store's token for this player's subscription.
    let token = Mutex<UInt64?>(nil)

    /// The Lavalink tracks of this player: the one asked for and not started yet, and the one
    /// playing. Each is `[encoded, info, pluginInfo, userData]` as the client gave it.
    struct Tracks: Sendable {
        var pending: JSONObject?
        var current: JSONObject?
        /// The engine's play id of `current` (its `ready`).
        var currentPlayID: Int?
        /// The voice object last given (`token`, `endpoint`, `sessionId`, `channelId`).
        var voice: JSONObject = ["token": "", "endpoint": "", "sessionId": ""]
        var connected = false
        /// The player's own volume as the client last set it (nil: the session's), and Lavalink's
        /// volume filter; the engine plays at their product (`PlayerUpdate.engineVolume`).
        var volume: Int?
        var filterVolume = 1.0
    }

    init(guild: SessionID, session: LavalinkSession) {
        self.guild = guild
        self.session = WeakSession(session)
        eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        state = Mutex(Tracks())
    }

    func encode(_ message: ClientMessage) -> ByteBuffer {
        guard case .event(let text) = message else { return ByteBuffer() }
        return ByteBuffer(string: text)
    }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        guard !audio, let event = LavalinkJSON.object(bytes.readableBytesView) else { return }
        let messages = state.withLock { Self.translate(event, guild: guild.description, tracks: &$0) }
        for message in messages { session.value?.send(LavalinkJSON.text(message)) }
    }

    /// The Lavalink messages one Tonearm event of the guild makes, and what it changes.
    static func translate(_ event: JSONObject, guild: String, tracks: inout Tracks) -> [JSONObject] {
        func message(_ type: String, _ fields: JSONObject) -> JSONObject {
            fields.merging(["op": "event", "type": type, "guildId": guild]) { _, new in new }
        }
        switch event["type"] as? String {
        case "ready":
            // A track the client did not give (the session's own queue moved on) has none to name.
            let playID = event["play_id"] as? Int
            guard playID == nil || playID != tracks.currentPlayID, let track = tracks.pending ?? tracks.current else { return [] }
            tracks.current = track
            tracks.currentPlayID = playID
            tracks.pending = nil
            return [message("TrackStartEvent", ["track": track])]
        case "finished":
            let reason = event["reason"] as? String ?? "finished"
            let lavalinkReason = ["finished": "finished", "stopped": "stopped", "replaced": "replaced", "cleanup": "cleanup"][reason]
            let playID = event["play_id"] as? Int
            // The end of the play that started last (by its id), or of a track that never started
            // (an error); an older play's end (stopped before the track now asked for) is not news.
            if let current = tracks.current, playID == nil || playID == tracks.currentPlayID {
                tracks.current = nil
                tracks.currentPlayID = nil
                return [message("TrackEndEvent", ["track": current, "reason": lavalinkReason ?? "loadFailed"])]
            }
            guard reason == "error", let pending = tracks.pending else { return [] }
            tracks.pending = nil
            return [message("TrackEndEvent", ["track": pending, "reason": "loadFailed"])]
        case "error":
            guard let track = tracks.pending ?? tracks.current else { return [] }
            let code = event["code"] as? String ?? "error"
            let exception: JSONObject = [
                "message": event["message"] as? String ?? code, "severity": Self.severity(code), "cause": code,
                "causeStackTrace": "",
            ]
            var messages = [message("TrackExceptionEvent", ["track": track, "exception": exception])]
            // A link that could not be looked up never reaches the engine: no `finished` follows.
            if event["url"] != nil, tracks.pending != nil {
                tracks.pending = nil
                messages.append(message("TrackEndEvent", ["track": track, "reason": "loadFailed"]))
            }
            return messages
        case "stuck":
            // The playing track's source stalls (the engine's threshold, `duration_ms`).
            let playID = event["play_id"] as? Int
            guard let current = tracks.current, playID == nil || playID == tracks.currentPlayID else { return [] }
            return [message("TrackStuckEvent", ["track": current, "thresholdMs": event["duration_ms"] as? Int ?? 10_000])]
        case "voice_state":
            switch event["state"] as? String {
            case "connected":
                tracks.connected = true
            case "disconnected":
                tracks.connected = false
                let code = event["code"] as? Int
                return [
                    message(
                        "WebSocketClosedEvent",
                        ["code": code ?? 1000, "reason": event["reason"] as? String ?? "", "byRemote": code != nil])
                ]
            default: break
            }
            return []
        default:
            return []
        }
    }

    /// Lavalink's severity for a Tonearm error code: `common` for what a source or a user did
    /// (the cause is known), `fault` for the rest.
    static func severity(_ code: String) -> String {
        code.hasPrefix("source_") || code.hasPrefix("invalid_") || code.hasSuffix("_not_found") || code == "unsupported_format"
            ? "common" : "fault"
    }
}

/// The session a player reports to, held weakly: the session holds its players.
final class WeakSession: Sendable {
    weak let value: LavalinkSession?
    init(_ value: LavalinkSession) { self.value = value }
}
