// `POST /session/{id}/play`: what to play, from where, how loud, through which filters.

/// The body of a play request. Every field is optional on the wire so that a missing one gets a
/// clear refusal from the engine rather than a decoding error.
public struct PlayRequest: Sendable, Equatable, Codable {
    /// An http(s) URL, a page yt-dlp understands, or a file name inside the media directory.
    public var url: String?
    /// Where to start, in ms from the beginning (0 when absent).
    public var startMS: Int64?
    /// A percentage from 0 to 1000 (100 when absent).
    public var volume: Int?
    /// The session's filters from this play on (as they were when absent).
    public var filters: Filters?
    /// Loudness normalisation from this play on (as it was when absent; on for a new session
    /// unless the engine is configured otherwise).
    public var normalize: Bool?

    public init(url: String?, startMS: Int64? = nil, volume: Int? = nil, filters: Filters? = nil, normalize: Bool? = nil) {
        self.url = url
        self.startMS = startMS
        self.volume = volume
        self.filters = filters
        self.normalize = normalize
    }

    enum CodingKeys: String, CodingKey {
        case url, volume, filters, normalize
        case startMS = "start_ms"
    }
}
