// What is known about a track before it is opened: a search result, a playlist entry.

/// A track's URL and what its page says about it (`duration_ms` only when known and sane).
public struct TrackMetadata: Sendable, Equatable, Codable {
    public var url: String
    public var title: String?
    public var durationMS: Int64?
    public var thumbnail: String?
    public var isLive: Bool
    public var uploader: String?

    public init(
        url: String, title: String? = nil, durationMS: Int64? = nil, thumbnail: String? = nil, isLive: Bool = false,
        uploader: String? = nil
    ) {
        self.url = url
        self.title = title
        self.durationMS = durationMS
        self.thumbnail = thumbnail
        self.isLive = isLive
        self.uploader = uploader
    }

    enum CodingKeys: String, CodingKey {
        case url, title, thumbnail, uploader
        case durationMS = "duration_ms"
        case isLive = "is_live"
    }
}
