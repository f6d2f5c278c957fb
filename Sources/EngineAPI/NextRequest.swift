// `POST /session/{id}/next`: the track that follows the current one, opened ahead and joined to it
// on the sample (gapless) or mixed into it over a crossfade; `DELETE /session/{id}/next` calls it off.
public import WireProtocol

/// The body of a next request. Every field is optional on the wire so that a missing one gets a
/// clear refusal from the engine rather than a decoding error.
public struct NextRequest: Sendable, Equatable, Codable {
    /// An http(s) URL, a page yt-dlp understands, or a file name inside the media directory.
    public var url: String?
    /// How long the two tracks are mixed, in ms from 0 (gapless) to 12,000 (0 when absent).
    public var crossfadeMS: Int?

    public init(url: String?, crossfadeMS: Int? = nil) {
        self.url = url
        self.crossfadeMS = crossfadeMS
    }

    /// The longest crossfade.
    public static let maxCrossfadeMS = 12_000

    enum CodingKeys: String, CodingKey {
        case url
        case crossfadeMS = "crossfade_ms"
    }
}

/// The answer to a next request (202) or to calling it off (200).
public struct NextQueued: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    /// The id the next play's events will carry; nil once called off.
    public var playID: UInt64?
    public var crossfadeMS: Int?

    public init(sessionID: SessionID, playID: UInt64?, crossfadeMS: Int?) {
        self.sessionID = sessionID
        self.playID = playID
        self.crossfadeMS = crossfadeMS
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case playID = "play_id"
        case crossfadeMS = "crossfade_ms"
    }
}
