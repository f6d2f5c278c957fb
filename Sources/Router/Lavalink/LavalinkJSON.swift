// The JSON Lavalink v4 clients read, built as Lavalink shapes it (docs/lavalink.md): tracks, load
// results, players, the node's info and stats, and its error body. Objects a client gave and gets
// back as they were (`userData`, `filters`) are kept as parsed JSON.
import EngineAPI
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A JSON object as JSONSerialization reads and writes it.
typealias JSONObject = [String: any Sendable]

enum LavalinkJSON {
    /// The Lavalink version `/version` answers: the API Tonearm speaks (clients compare it with
    /// the major version they need); `/v4/info` names Tonearm as its build.
    static let version = "4.0.0"
    /// The Lavalink API version these routes speak.
    static let apiVersion = 4

    static func data(_ value: Any) -> Data {
        (try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    }

    static func text(_ value: Any) -> String { String(decoding: data(value), as: UTF8.self) }

    static func response(_ value: Any, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data(value))))
    }

    /// A track object: `encoded`, `info`, `pluginInfo`, `userData`.
    static func track(_ encoded: String, _ info: LavalinkTrackInfo, userData: JSONObject = [:]) -> JSONObject {
        let infoObject = (try? JSONSerialization.jsonObject(with: JSONEncoder().encode(info))) as? JSONObject ?? [:]
        return ["encoded": encoded, "info": infoObject, "pluginInfo": JSONObject(), "userData": userData]
    }

    /// The track Tonearm plays for `metadata`, as lavaplayer would have named it: `local` for a
    /// file of the media folder, `http` for a direct link, the page's site for anything yt-dlp read.
    static func info(_ metadata: TrackMetadata, asked: String, isFile: Bool) -> LavalinkTrackInfo {
        let url = metadata.url
        let source: String =
            if isFile { "local" } else if url.contains("youtube.com/") || url.contains("youtu.be/") { "youtube" } else if url.contains(
                "soundcloud.com/")
            { "soundcloud" } else { "http" }
        let identifier = source == "youtube" ? (URLComponents(string: url)?.queryItems?.first { $0.name == "v" }?.value ?? url) : url
        return LavalinkTrackInfo(
            identifier: identifier, isSeekable: !metadata.isLive, author: metadata.uploader ?? "Unknown artist",
            length: metadata.isLive ? Int64.max : max(metadata.durationMS ?? 0, 0), isStream: metadata.isLive, position: 0,
            title: metadata.title ?? (isFile ? asked : "Unknown title"), uri: url, artworkUrl: metadata.thumbnail, isrc: nil,
            sourceName: source)
    }

    /// Lavalink's error body, with the HTTP status's own phrase as `error`.
    static func error(status: HTTPResponse.Status, message: String, path: String, trace: String?) -> Response {
        var body: JSONObject = [
            "timestamp": Int64(Date().timeIntervalSince1970 * 1_000), "status": status.code, "error": status.reasonPhrase,
            "message": message, "path": path,
        ]
        if let trace { body["trace"] = trace }
        return response(body, status: status)
    }

    /// Reads a JSON object from a client's body; nil when it is not one.
    static func object(_ bytes: some Collection<UInt8>) -> JSONObject? {
        (try? JSONSerialization.jsonObject(with: Data(bytes))) as? JSONObject
    }
}

/// An error a Lavalink route answers, in Lavalink's body.
struct LavalinkError: Error {
    var status: HTTPResponse.Status
    var message: String
    /// Tonearm's own error code behind it, for the trace.
    var code: String? = nil

    static func badRequest(_ message: String) -> LavalinkError { .init(status: .badRequest, message: message) }
    static func notFound(_ message: String) -> LavalinkError { .init(status: .notFound, message: message) }
}
