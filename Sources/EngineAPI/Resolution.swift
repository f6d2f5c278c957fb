// `GET /resolve?url=`: what a URL holds before anything plays it.

/// One track, or a playlist's entries (not yet resolved to streams).
public struct Resolution: Sendable, Equatable, Codable {
    public var url: String
    public var title: String?
    public var durationMS: Int64?
    public var thumbnail: String?
    public var isLive: Bool
    public var isPlaylist: Bool
    public var entries: [TrackMetadata]

    public init(
        url: String, title: String? = nil, durationMS: Int64? = nil, thumbnail: String? = nil, isLive: Bool = false,
        isPlaylist: Bool = false, entries: [TrackMetadata] = []
    ) {
        self.url = url
        self.title = title
        self.durationMS = durationMS
        self.thumbnail = thumbnail
        self.isLive = isLive
        self.isPlaylist = isPlaylist
        self.entries = entries
    }

    enum CodingKeys: String, CodingKey {
        case url, title, thumbnail, entries
        case durationMS = "duration_ms"
        case isLive = "is_live"
        case isPlaylist = "is_playlist"
    }
}
