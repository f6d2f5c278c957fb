// A Lavalink player: one guild of one Lavalink session, played by the Tonearm session of the same
// id. It is a text-only client of that session (`ClientKind.lavalink`): the session's events come
// to it in order and leave as Lavalink's (`LavalinkPlayer.translate`, a pure function):
//   ready → TrackStartEvent; finished → TrackEndEvent (finished, stopped, replaced, cleanup; an
//   error → loadFailed; none when the guild moved to another pair of a cluster, where its track
//   goes on without a new TrackStartEvent); error → TrackExceptionEvent (and TrackEndEvent
//   loadFailed for a track that never started); stuck → TrackStuckEvent; voice_state
//   disconnected → WebSocketClosedEvent with Discord's code.
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
    /// Told when the player's track changes (in a cluster, the player's row is written again).
    private let changed: @Sendable (LavalinkPlayer) -> Void

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
        /// Tracks given to Tonearm's queue through the plugin (`POST …/tonearm/queue`), in its
        /// order: each becomes `current` at the next `ready` that has no `pending`.
        var queued: [JSONObject] = []
        /// In a cluster, a player run again at the pair that took its guild on: the next `ready`
        /// is its track going on there, which the client was told of already.
        var continuing = false
    }

    init(guild: SessionID, session: LavalinkSession, changed: @escaping @Sendable (LavalinkPlayer) -> Void = { _ in }) {
        self.guild = guild
        self.session = WeakSession(session)
        self.changed = changed
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
        if messages.contains(where: { ["TrackStartEvent", "TrackEndEvent"].contains($0["type"] as? String) }) { changed(self) }
    }

    /// The guild moved to another pair of the cluster, which runs its player from now on (from
    /// the player's row): it leaves this Router's session, without a word to the client.
    func moved() {
        guard let owner = session.value, owner.player(guild) === self else { return }
        _ = owner.removePlayer(guild)
    }

    /// The Lavalink messages one Tonearm event of the guild makes, and what it changes.
    static func translate(_ event: JSONObject, guild: String, tracks: inout Tracks) -> [JSONObject] {
        func message(_ type: String, _ fields: JSONObject) -> JSONObject {
            fields.merging(["op": "event", "type": type, "guildId": guild]) { _, new in new }
        }
        switch event["type"] as? String {
        case "ready":
            let playID = event["play_id"] as? Int
            guard playID == nil || playID != tracks.currentPlayID else { return [] }
            if tracks.continuing, tracks.pending == nil, tracks.current != nil {
                tracks.continuing = false
                tracks.currentPlayID = playID
                return []
            }
            var messages: [JSONObject] = []
            let track: JSONObject
            if let pending = tracks.pending {
                track = pending
                tracks.pending = nil
            } else if !tracks.queued.isEmpty {
                // Tonearm's queue moved on to a track given through the plugin. A gapless join's
                // `ready` comes before the previous play's `finished`: that one ended `replaced`
                // (as below), and its later `finished` is an older play's.
                if let previous = tracks.current { messages.append(message("TrackEndEvent", ["track": previous, "reason": "replaced"])) }
                track = tracks.queued.removeFirst()
            } else if let current = tracks.current {
                track = current
            } else {
                // A track the client did not give (another client queued it) has none to name.
                return []
            }
            tracks.current = track
            tracks.currentPlayID = playID
            return messages + [message("TrackStartEvent", ["track": track])]
        case "finished":
            // The guild goes on at another pair of the cluster, and so does its track.
            if let code = event["code"] as? String, Self.movedCodes.contains(code) { return [] }
            let reason = event["reason"] as? String ?? "finished"
            let lavalinkReason = ["finished": "finished", "stopped": "stopped", "replaced": "replaced", "cleanup": "cleanup"][reason]
            let playID = event["play_id"] as? Int
            // The end of the play that started last (by its id), or of a track that never started
            // (an error); an older play's end (stopped before the track now asked for) is not news.
            if let current = tracks.current, playID == nil || playID == tracks.currentPlayID {
                tracks.current = nil
                tracks.currentPlayID = nil
                // Tonearm's queue goes on with a track given through the plugin: `replaced`
                // (mayStartNext false), so that the client's own queue does not start over it.
                let next = reason == "finished" && !tracks.queued.isEmpty ? "replaced" : lavalinkReason
                return [message("TrackEndEvent", ["track": current, "reason": next ?? "loadFailed"])]
            }
            guard reason == "error" else { return [] }
            if let pending = tracks.pending {
                tracks.pending = nil
                return [message("TrackEndEvent", ["track": pending, "reason": "loadFailed"])]
            }
            // A queued track that never started: the next `ready` is the one after it.
            guard !tracks.queued.isEmpty else { return [] }
            return [message("TrackEndEvent", ["track": tracks.queued.removeFirst(), "reason": "loadFailed"])]
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

    /// The codes of a play that ended because its guild moved to another pair (a hand-over, the
    /// fence of a pair that lost its lease).
    static let movedCodes: Set<String> = ["handed_over", "fenced"]

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
