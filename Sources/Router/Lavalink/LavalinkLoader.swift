// `GET /v4/loadtracks?identifier=…`: an identifier made into Lavalink's load result through the
// engine — `ytsearch:`, `ytmsearch:` and `scsearch:` through its yt-dlp search, anything else
// (an http(s) link, a page yt-dlp understands, a file of the media folder) through its resolve.
// The loadType is `track`, `playlist`, `search`, `empty` or `error`, each shaped as Lavalink's.
import EngineAPI
import Foundation
import NIOCore
import ServiceSupport

struct LavalinkLoader: Sendable {
    let engine: EngineClient

    /// Search prefixes and the engine's `source` for each.
    static let searchPrefixes = ["ytsearch:": "ytsearch", "ytmsearch:": "ytmsearch", "scsearch:": "scsearch"]
    /// How many results a search gives, as Lavalink's YouTube search does at most.
    static let searchLimit = 10

    func load(_ identifier: String) async -> JSONObject {
        for (prefix, source) in Self.searchPrefixes where identifier.hasPrefix(prefix) {
            let words = String(identifier.dropFirst(prefix.count))
            guard !words.trimmingCharacters(in: .whitespaces).isEmpty else { return ["loadType": "empty", "data": JSONObject()] }
            do {
                let reply = try await engine.search(words, limit: Self.searchLimit, owner: nil, source: source)
                let results = try JSONDecoder().decode(SearchResults.self, from: Data(reply.body.readableBytesView)).results
                guard !results.isEmpty else { return ["loadType": "empty", "data": JSONObject()] }
                return ["loadType": "search", "data": results.map { Self.track($0, asked: words, isFile: false) }]
            } catch {
                return Self.failure(error)
            }
        }
        do {
            let resolution = try await engine.resolve(identifier, owner: nil)
            let isFile = !identifier.contains("://")
            if resolution.isPlaylist {
                guard !resolution.entries.isEmpty else { return ["loadType": "empty", "data": JSONObject()] }
                return [
                    "loadType": "playlist",
                    "data": [
                        "info": ["name": resolution.title ?? identifier, "selectedTrack": -1] as JSONObject, "pluginInfo": JSONObject(),
                        "tracks": resolution.entries.map { Self.track($0, asked: identifier, isFile: false) },
                    ] as JSONObject,
                ]
            }
            let metadata = TrackMetadata(
                url: resolution.url, title: resolution.title, durationMS: resolution.durationMS, thumbnail: resolution.thumbnail,
                isLive: resolution.isLive)
            return ["loadType": "track", "data": Self.track(metadata, asked: identifier, isFile: isFile)]
        } catch {
            return Self.failure(error)
        }
    }

    /// The first track of a load result, to play (`identifier` in a player update).
    static func firstTrack(_ result: JSONObject) -> JSONObject? {
        switch result["loadType"] as? String {
        case "track": return result["data"] as? JSONObject
        case "search": return (result["data"] as? [JSONObject])?.first
        case "playlist": return ((result["data"] as? JSONObject)?["tracks"] as? [JSONObject])?.first
        default: return nil
        }
    }

    static func track(_ metadata: TrackMetadata, asked: String, isFile: Bool) -> JSONObject {
        let info = LavalinkJSON.info(metadata, asked: asked, isFile: isFile)
        let probe = (metadata.url as NSString).pathExtension.lowercased()
        return LavalinkJSON.track(LavalinkTrackCodec.encode(info, probeInfo: probe), info)
    }

    /// No match is `empty`; anything else that failed is `error` with Lavalink's severity.
    static func failure(_ error: any Error) -> JSONObject {
        let apiError = error as? APIError
        let code = apiError?.code ?? "internal_error"
        if ["not_found", "source_not_found", "file_not_found"].contains(code) { return ["loadType": "empty", "data": JSONObject()] }
        return [
            "loadType": "error",
            "data": [
                "message": apiError?.message ?? "the track could not be loaded", "severity": LavalinkPlayer.severity(code),
                "cause": code, "causeStackTrace": "",
            ] as JSONObject,
        ]
    }
}
