// What `/hls/{id}/{file}` answers with, the same whether the route or `HLSFastPath` answers: the
// playlist (refreshed every 2 s by a player: a cache keeps it for 1 s), the initialisation segment
// (the same for every session and every day: kept a year), a media segment (never changes once
// cut: kept a minute, longer than the playlist names it).
import Foundation
import HTTPTypes
import NIOCore

struct HLSFile: Sendable {
    let body: ByteBuffer
    let contentType: String
    let cacheControl: String

    static func playlist(_ text: String) -> HLSFile {
        HLSFile(body: ByteBuffer(string: text), contentType: "application/vnd.apple.mpegurl", cacheControl: "public, max-age=1")
    }

    /// `init.mp4`: the same bytes for every session.
    static let initialization = HLSFile(
        body: FragmentedOpus.initialization(), contentType: "audio/mp4", cacheControl: "public, max-age=31536000, immutable")

    static func segment(_ bytes: ByteBuffer) -> HLSFile {
        HLSFile(body: bytes, contentType: "audio/mp4", cacheControl: "public, max-age=60")
    }

    /// The sequence number a media segment's name (`{n}.m4s`) gives, or nil for any other name.
    static func sequence(_ file: Substring) -> UInt32? {
        guard file.hasSuffix(".m4s") else { return nil }
        return UInt32(file.dropLast(4))
    }

    var headers: HTTPFields {
        [.contentType: contentType, .cacheControl: cacheControl]
    }

    /// The query a playlist's URIs carry for a listener who gave `token` as `?token=` (already
    /// percent-decoded): it is encoded again, so every character comes back as it went.
    static func query(token: Substring?) -> String {
        guard let token else { return "" }
        return "token=" + (String(token).addingPercentEncoding(withAllowedCharacters: unreserved) ?? "")
    }

    /// What a token may hold unescaped in a playlist's URIs (RFC 3986's unreserved characters).
    private static let unreserved = CharacterSet(charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
}
