// `POST /session/{id}/layers`: a sound played over the session's track (an announcement, a sound
// effect, a jingle), mixed into the same frames before the one encoder, with the track ducked
// under it; `DELETE /session/{id}/layers/{layer_id}` ends it early.
public import WireProtocol

/// The body of a layer request. Every field is optional on the wire so that a missing or wrong
/// one gets a clear refusal from the engine rather than a decoding error.
public struct LayerRequest: Sendable, Equatable, Codable {
    /// An http(s) URL, a page yt-dlp understands, or a file name inside the media directory.
    public var url: String?
    /// The layer's level in percent of its source, 0 to 1000 (100 when absent).
    public var volume: Int?
    /// How far the track falls while the layer sounds, in dB from 0 (no ducking) to 60 (12 when absent).
    public var duckDB: Double?
    /// How long the track takes to fall, in ms from 0 to 5,000 (50 when absent).
    public var attackMS: Int?
    /// How long it takes to come back once the layer ended, in ms from 0 to 10,000 (400 when absent).
    public var releaseMS: Int?

    public init(url: String?, volume: Int? = nil, duckDB: Double? = nil, attackMS: Int? = nil, releaseMS: Int? = nil) {
        self.url = url
        self.volume = volume
        self.duckDB = duckDB
        self.attackMS = attackMS
        self.releaseMS = releaseMS
    }

    public static let defaultDuckDB = 12.0
    public static let defaultAttackMS = 50
    public static let defaultReleaseMS = 400
    public static let duckRange = 0.0...60.0
    public static let attackRange = 0...5_000
    public static let releaseRange = 0...10_000
    /// The most layers one play carries at once.
    public static let maxLayers = 4

    /// What is wrong with the fields given, if anything (the URL is checked where it is resolved).
    public var problem: (code: String, message: String)? {
        if let volume, !(0...1000).contains(volume) {
            return ("invalid_volume", "\"volume\" is a percentage from 0 to 1000, got \(volume)")
        }
        if let duckDB, !(duckDB.isFinite && Self.duckRange.contains(duckDB)) {
            return ("invalid_duck", "\"duck_db\" is a level in dB from 0 to 60, got \(duckDB)")
        }
        if let attackMS, !Self.attackRange.contains(attackMS) {
            return ("invalid_attack", "\"attack_ms\" must be from 0 to 5000, got \(attackMS)")
        }
        if let releaseMS, !Self.releaseRange.contains(releaseMS) {
            return ("invalid_release", "\"release_ms\" must be from 0 to 10000, got \(releaseMS)")
        }
        return nil
    }

    enum CodingKeys: String, CodingKey {
        case url, volume
        case duckDB = "duck_db"
        case attackMS = "attack_ms"
        case releaseMS = "release_ms"
    }
}

/// The answer to a layer request (202): the layer's id, which its `layer_started` and
/// `layer_ended` events carry, and the settings it plays with.
public struct LayerStarted: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    /// The play the layer is mixed into: it ends with that play.
    public var playID: UInt64
    public var layerID: UInt64
    public var volume: Int
    public var duckDB: Double
    public var attackMS: Int
    public var releaseMS: Int

    public init(
        sessionID: SessionID, playID: UInt64, layerID: UInt64, volume: Int, duckDB: Double, attackMS: Int, releaseMS: Int
    ) {
        self.sessionID = sessionID
        self.playID = playID
        self.layerID = layerID
        self.volume = volume
        self.duckDB = duckDB
        self.attackMS = attackMS
        self.releaseMS = releaseMS
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case playID = "play_id"
        case layerID = "layer_id"
        case volume
        case duckDB = "duck_db"
        case attackMS = "attack_ms"
        case releaseMS = "release_ms"
    }
}

/// The answer to ending a layer (200).
public struct LayerStopped: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    public var layerID: UInt64
    public var stopped: Bool

    public init(sessionID: SessionID, layerID: UInt64, stopped: Bool) {
        self.sessionID = sessionID
        self.layerID = layerID
        self.stopped = stopped
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case layerID = "layer_id"
        case stopped
    }
}
