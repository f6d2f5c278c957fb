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
    /// Cue points from this play on (as it was when absent; off for a new session): a gapless
    /// join or a crossfade goes from a track's cue-out to the next one's cue-in.
    public var cue: Bool?
    /// Wall-clock ms since 1970 before which the play sends nothing: it opens, seeks and encodes
    /// ahead meanwhile, and its first frame goes out on the first tick at or after then (a
    /// hand-over from another engine; see HandOverRequest). Absent or past: as soon as it can;
    /// more than a minute ahead: a minute ahead.
    public var startAtMS: Int64?

    public init(
        url: String?, startMS: Int64? = nil, volume: Int? = nil, filters: Filters? = nil, normalize: Bool? = nil,
        startAtMS: Int64? = nil, cue: Bool? = nil
    ) {
        self.cue = cue
        self.url = url
        self.startAtMS = startAtMS
        self.startMS = startMS
        self.volume = volume
        self.filters = filters
        self.normalize = normalize
    }

    enum CodingKeys: String, CodingKey {
        case url, volume, filters, normalize, cue
        case startMS = "start_ms"
        case startAtMS = "start_at_ms"
    }
}
