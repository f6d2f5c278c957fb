// Tonearm's extras for Lavalink clients, as a plugin named `tonearm` (docs/lavalink.md#tonearms-plugin):
// routes under `/v4/sessions/{sessionId}/players/{guildId}/tonearm`, answered and refused in
// Lavalink's bodies, behind the same password. A client that knows nothing of them plays as on
// Lavalink; one that does reaches what Lavalink has not:
//   GET, PATCH …/tonearm        the guild's settings (normalize, cue, crossfadeMs), its listeners'
//                               link and the tracks waiting in Tonearm's queue
//   POST …/tonearm/queue        tracks (encoded, or identifiers loaded first) into Tonearm's queue,
//                               which plays them one after the other with no request in between
//   DELETE …/tonearm/queue      the waiting tracks removed (what plays goes on)
//   POST …/tonearm/layers       a sound over the music, which ducks under it
//   DELETE …/tonearm/layers/{layerId}
import EngineAPI
import Foundation
import HTTPTypes
import Hummingbird
import ServiceSupport
import Synchronization
import WireProtocol

struct TonearmPlugin: Sendable {
    let node: LavalinkNode
    let layers: LayerCommands
    let tokens: IdentityTokens

    /// `/v4/info`'s `plugins` entry.
    static var info: JSONObject { ["name": TonearmSettings.pluginName, "version": LavalinkJSON.version] }

    /// The most tracks one `POST …/tonearm/queue` takes.
    static let maxTracksPerRequest = 100

    func addRoutes(to router: Router<TonearmRequestContext>) {
        let base = "/v4/sessions/:session/players/:guild/tonearm"
        router.get(RouterPath(base)) { request, context in
            await answer(request) { () async throws(LavalinkError) in
                await overview(try await player(context))
            }
        }
        router.patch(RouterPath(base)) { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            return await answer(request) { () async throws(LavalinkError) in
                let player = try await player(context)
                guard let object = LavalinkJSON.object(body.readableBytesView) else { throw .badRequest("the body must be a JSON object") }
                for command in try TonearmSettings(object, field: "body").commands { try await node.run(command, on: player.guild) }
                return await overview(player)
            }
        }
        router.post(RouterPath(base + "/queue")) { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 1 << 20)
            return await answer(request) { () async throws(LavalinkError) in
                try await enqueue(body.readableBytesView, on: try await player(context))
            }
        }
        router.delete(RouterPath(base + "/queue")) { request, context in
            await answer(request) { () async throws(LavalinkError) in
                let player = try await player(context)
                if let view = await node.directory.existing(player.guild)?.state {
                    // Everything after what plays, last first so that each index stays where it was.
                    for index in stride(from: view.queue.count - 1, to: view.current ?? -1, by: -1) {
                        try await node.run(.remove(index: index), on: player.guild)
                    }
                }
                player.state.withLock { $0.queued.removeAll() }
                return await overview(player)
            }
        }
        router.post(RouterPath(base + "/layers")) { request, context in
            var request = request
            let body = try await request.collectBody(upTo: 64 * 1024)
            return await answer(request) { () async throws(LavalinkError) in
                let player = try await player(context)
                guard let object = LavalinkJSON.object(body.readableBytesView) else { throw .badRequest("the body must be a JSON object") }
                let layer = try Self.layerRequest(object)
                let started = try await lavalinkErrors { () async throws(APIError) in try await layers.add(layer, on: player.guild) }
                return [
                    "layerId": started.layerID, "volume": started.volume, "duckDb": started.duckDB, "attackMs": started.attackMS,
                    "releaseMs": started.releaseMS,
                ] as JSONObject
            }
        }
        router.delete(RouterPath(base + "/layers/:layer")) { request, context in
            await answer(request, status: .noContent) { () async throws(LavalinkError) in
                let player = try await player(context)
                guard let layer = context.parameters.get("layer").flatMap({ UInt64($0) }) else {
                    throw .badRequest("the layer id is the number POST …/tonearm/layers answered")
                }
                _ = try await lavalinkErrors { () async throws(APIError) in try await layers.remove(layer, on: player.guild) }
                return NSNull()
            }
        }
    }

    /// The player a plugin route names: its session must exist and hold it (Lavalink's 404s).
    private func player(_ context: TonearmRequestContext) async throws(LavalinkError) -> LavalinkPlayer {
        let session = try await node.session(context.parameters.get("session") ?? "")
        guard let player = session.player(try LavalinkRoutes.guild(context)) else { throw .notFound("Player not found") }
        return player
    }

    /// `GET …/tonearm`: the settings, the listeners' link (paths on this Router's address, with a
    /// listen token: it hears this guild and controls nothing) and the tracks given through the
    /// plugin that wait in Tonearm's queue.
    private func overview(_ player: LavalinkPlayer) async -> JSONObject {
        let state = await node.directory.existing(player.guild)?.state
        let token = tokens.listenToken(for: player.guild)
        let escaped = token.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? token
        var object = TonearmSettings.json(state, directory: node.directory)
        object["listen"] = [
            "token": token, "ogg": "/listen/\(player.guild).ogg?token=\(escaped)", "hls": "/hls/\(player.guild)/index.m3u8?token=\(escaped)",
        ] as JSONObject
        object["queue"] = player.state.withLock { $0.queued }
        return object
    }

    /// `POST …/tonearm/queue` `{"tracks": [{"encoded": …} | {"identifier": …}, …]}`: each track
    /// read (an identifier loaded as `/v4/loadtracks` would, its first track taken) before any is
    /// queued, then queued in order. Answers the tracks queued.
    private func enqueue(_ body: some Collection<UInt8>, on player: LavalinkPlayer) async throws(LavalinkError) -> JSONObject {
        guard let object = LavalinkJSON.object(body), let given = object["tracks"] as? [Any] else {
            throw .badRequest("the body must be {\"tracks\": [{\"encoded\": …} or {\"identifier\": …}, …]}")
        }
        guard (1...Self.maxTracksPerRequest).contains(given.count) else {
            throw .badRequest("tracks must hold 1 to \(Self.maxTracksPerRequest) tracks")
        }
        var tracks: [(track: JSONObject, url: String)] = []
        for (index, item) in given.enumerated() {
            guard let fields = item as? JSONObject else { throw .badRequest("tracks[\(index)] must be an object") }
            let change: PlayerUpdate.TrackChange
            do {
                change = try PlayerUpdate(["track": fields]).track
            } catch {
                throw .badRequest("tracks[\(index)]: \(error.message)")
            }
            switch change {
            case .play(let track, let url): tracks.append((track, url))
            case .identifier(let identifier, let userData):
                guard var track = LavalinkLoader.firstTrack(await LavalinkLoader(engine: node.engine).load(identifier)),
                    let info = track["info"] as? JSONObject
                else { throw .badRequest("tracks[\(index)]: identifier \(identifier) loads no track") }
                track["userData"] = userData
                tracks.append((track, info["uri"] as? String ?? identifier))
            case .keep, .stop: throw .badRequest("tracks[\(index)] must have encoded or identifier")
            }
        }
        for (track, url) in tracks {
            // Known before the engine can start it, so that its `ready` finds it.
            player.state.withLock { $0.queued.append(track) }
            do {
                try await node.run(.enqueue(url: url), on: player.guild)
            } catch {
                let encoded = track["encoded"] as? String
                player.state.withLock { state in
                    if let last = state.queued.lastIndex(where: { $0["encoded"] as? String == encoded }) { state.queued.remove(at: last) }
                }
                throw error
            }
        }
        return ["queued": tracks.map(\.track)]
    }

    /// A layer from the plugin's body: `identifier` (what `/v4/loadtracks` takes but a search: a
    /// link, a page yt-dlp understands or a media-folder file), `volume` (0–1000 %), `duckDb`,
    /// `attackMs`, `releaseMs`; the ranges are the engine's (`LayerRequest.problem`).
    static func layerRequest(_ object: JSONObject) throws(LavalinkError) -> LayerRequest {
        for key in object.keys where !["identifier", "volume", "duckDb", "attackMs", "releaseMs"].contains(key) {
            throw .badRequest("\(key) is not a layer field (identifier, volume, duckDb, attackMs, releaseMs)")
        }
        guard let identifier = object["identifier"] as? String, !identifier.isEmpty else {
            throw .badRequest("identifier is required: a link or a media-folder file")
        }
        func whole(_ key: String) throws(LavalinkError) -> Int? {
            guard let value = object[key] else { return nil }
            guard let number = PlayerUpdate.integer(value), let small = Int(exactly: number), abs(small) <= 1_000_000 else {
                throw .badRequest("\(key) must be a whole number")
            }
            return small
        }
        var duck: Double?
        if let value = object["duckDb"] {
            guard let number = PlayerUpdate.number(value), number.isFinite else { throw .badRequest("duckDb must be a number") }
            duck = number
        }
        let request = LayerRequest(
            url: identifier, volume: try whole("volume"), duckDB: duck, attackMS: try whole("attackMs"), releaseMS: try whole("releaseMs"))
        if let problem = request.problem { throw .badRequest(problem.message) }
        return request
    }

    private func lavalinkErrors<T>(_ body: () async throws(APIError) -> T) async throws(LavalinkError) -> T {
        do {
            return try await body()
        } catch {
            throw LavalinkError(status: error.status, message: error.message, code: error.code)
        }
    }
}
