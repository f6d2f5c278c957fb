// What a `PATCH /v4/sessions/{sessionId}/players/{guildId}` body asks, read and checked before
// anything is done: every field is untrusted, and a wrong one refuses the whole update (400, in
// Lavalink's error body) rather than leaving it half done.
import EngineAPI
import Foundation
import ServiceSupport

struct PlayerUpdate: Sendable {
    enum TrackChange: Sendable {
        /// No track field: the player keeps what it plays.
        case keep
        /// `encoded: null`: stop.
        case stop
        /// A track to play: the Lavalink track object and the URL Tonearm plays.
        case play(JSONObject, url: String)
        /// `identifier`: loaded first (as `/v4/loadtracks` would), its first track played.
        case identifier(String, userData: JSONObject)
    }

    var track = TrackChange.keep
    var position: Int64?
    /// `endTime`: where the track ends (ms), or `null`: where it does (the field left out: no change).
    var endTime: Int64??
    var volume: Int?
    var paused: Bool?
    var filters: Filters?
    /// Lavalink's `volume` filter, given with every `filters` (1 when it is left out).
    var filterVolume: Double?
    /// `filters.pluginFilters.tonearm`: Tonearm's settings of the guild (kept until changed, not
    /// replaced with the other filters: they are the guild's, as its queue is).
    var settings: TonearmSettings?
    var voice: JSONObject?

    /// The largest position a seek takes (Tonearm's own limit).
    static let maxPositionMS = SessionMachine.maxPositionMS
    /// Lavalink's range for the volume filter.
    static let maxFilterVolume = 5.0

    /// The engine's volume for a player's volume (0–1000) and volume filter (0–5): their product,
    /// held to the engine's range (0–1000: ten times, +20 dB).
    static func engineVolume(_ volume: Int, filter: Double) -> Int {
        let product = (Double(volume) * filter).rounded()
        return product.isFinite ? Int(min(max(product, 0), 1_000)) : 100
    }

    init(_ body: JSONObject) throws(LavalinkError) {
        if let track = body["track"] {
            guard let track = track as? JSONObject else { throw .badRequest("track must be an object") }
            self.track = try Self.trackChange(track)
        } else if body.keys.contains("encodedTrack") {
            // v4's deprecated top-level fields, which older clients still send.
            self.track = try Self.trackChange(["encoded": body["encodedTrack"] ?? NSNull()])
        } else if let identifier = body["identifier"] {
            self.track = try Self.trackChange(["identifier": identifier])
        }
        if let value = body["position"] {
            guard let position = Self.integer(value), position >= 0, position <= Self.maxPositionMS else {
                throw .badRequest("position must be a whole number of milliseconds from 0 to \(Self.maxPositionMS)")
            }
            self.position = position
        }
        if let value = body["endTime"] {
            if value is NSNull {
                endTime = .some(nil)
            } else {
                guard let end = Self.integer(value), end > 0, end <= Self.maxPositionMS else {
                    throw .badRequest("endTime must be a whole number of milliseconds from 1 to \(Self.maxPositionMS), or null")
                }
                endTime = .some(end)
            }
        }
        if let value = body["volume"] {
            guard let volume = Self.integer(value), (0...1_000).contains(volume) else {
                throw .badRequest("volume must be a whole number from 0 to 1000")
            }
            self.volume = Int(volume)
        }
        if let value = body["paused"] {
            guard let paused = value as? Bool, Self.isBoolean(value) else { throw .badRequest("paused must be true or false") }
            self.paused = paused
        }
        if let value = body["filters"] {
            guard var object = value as? JSONObject else { throw .badRequest("filters must be an object") }
            // Lavalink's volume filter: a factor on the player's volume (0 to 5, 1 unchanged).
            // Given filters replace all the filters before, so without it the factor is 1 again.
            if let volume = object.removeValue(forKey: "volume"), !(volume is NSNull) {
                guard let factor = Self.number(volume), (0...Self.maxFilterVolume).contains(factor) else {
                    throw .badRequest("filters.volume must be a number from 0 to \(Self.maxFilterVolume)")
                }
                filterVolume = factor
            } else {
                filterVolume = 1
            }
            settings = try TonearmSettings.fromPluginFilters(object.removeValue(forKey: "pluginFilters"))
            let read: Filters
            do {
                read = try CommandParsing.arguments(LavalinkJSON.data(object)).filters
            } catch {
                throw .badRequest("filters: \(error.message)")
            }
            if let problem = read.problem { throw .badRequest("filters: \(problem)") }
            filters = read
        }
        if let value = body["voice"] {
            guard let voice = value as? JSONObject else { throw .badRequest("voice must be an object") }
            self.voice = voice
        }
    }

    private static func trackChange(_ track: JSONObject) throws(LavalinkError) -> TrackChange {
        let userData = track["userData"] as? JSONObject ?? [:]
        if track["userData"] != nil, track["userData"] as? JSONObject == nil { throw .badRequest("track.userData must be an object") }
        if let encoded = track["encoded"] {
            if encoded is NSNull { return .stop }
            guard let encoded = encoded as? String else { throw .badRequest("track.encoded must be a string or null") }
            let info: LavalinkTrackInfo
            do {
                info = try LavalinkTrackCodec.decode(encoded)
            } catch {
                throw .badRequest("track.encoded is not a track: \(error.description)")
            }
            return .play(LavalinkJSON.track(encoded, info, userData: userData), url: info.playable)
        }
        if let identifier = track["identifier"] {
            guard let identifier = identifier as? String, !identifier.isEmpty else { throw .badRequest("track.identifier must be a string") }
            return .identifier(identifier, userData: userData)
        }
        return .keep
    }

    /// A whole number (not a boolean, not a fraction): a JSON number, or a string of one, which
    /// Lavalink's JSON reader (kotlinx.serialization) also takes where it expects a number and
    /// pomice sends for `position`.
    static func integer(_ value: Any) -> Int64? {
        if let text = value as? String {
            guard let whole = Int64(text), whole.magnitude < 1 << 62 else { return nil }
            return whole
        }
        guard let number = value as? NSNumber, !isBoolean(value), number.doubleValue == number.doubleValue.rounded(),
            abs(number.doubleValue) < 0x1p62
        else { return nil }
        return number.int64Value
    }

    /// A JSON number (not a boolean) as a Double.
    static func number(_ value: Any) -> Double? {
        guard let number = value as? NSNumber, !isBoolean(value) else { return nil }
        return number.doubleValue
    }

    /// JSON's true and false (JSONSerialization reads them as NSNumbers of Objective-C type `c`;
    /// a number 1 passes `as? Bool` too, so that cannot tell them apart).
    static func isBoolean(_ value: Any) -> Bool {
        guard let number = value as? NSNumber else { return false }
        return String(cString: number.objCType) == "c"
    }
}
