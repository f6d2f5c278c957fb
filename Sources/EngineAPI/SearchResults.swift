// `GET /search?q=&limit=`: what yt-dlp's search found, best first.

/// Search hits as tracks.
public struct SearchResults: Sendable, Equatable, Codable {
    public var results: [TrackMetadata]

    public init(results: [TrackMetadata]) { self.results = results }
}
