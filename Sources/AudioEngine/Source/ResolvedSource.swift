// A source the engine has agreed to open, whatever it started as (a media-directory file, a
// direct http(s) media URL, or a page that yt-dlp resolved to a stream URL).
import EngineAPI
import Foundation

struct ResolvedSource: Sendable, Equatable {
    /// A file path, or the http(s) URL the engine fetches.
    var location: String
    /// A name to show when the source carries no title.
    var displayName: String
    /// Fetched over HTTP(S) into a read-ahead buffer (network) rather than read directly (file).
    var isNetwork = false
    /// HTTP headers to send with every request (what yt-dlp asked for: User-Agent, Referer, …).
    var headers: [String: String] = [:]
    /// Metadata from yt-dlp, when it resolved the source.
    var metadata: TrackMetadata?
    /// When the stream URL stops working (yt-dlp's signed URLs expire).
    var expiresAt: Date?
    /// The URL the user asked for, to resolve again after expiry.
    var pageURL: String?

    init(
        location: String, displayName: String, isNetwork: Bool = false, headers: [String: String] = [:],
        metadata: TrackMetadata? = nil, expiresAt: Date? = nil, pageURL: String? = nil
    ) {
        self.location = location
        self.displayName = displayName
        self.isNetwork = isNetwork
        self.headers = headers
        self.metadata = metadata
        self.expiresAt = expiresAt
        self.pageURL = pageURL
    }
}
