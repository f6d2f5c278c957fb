// Tonearm's settings of a guild that Lavalink has no field for (docs/lavalink.md#tonearms-plugin):
// loudness normalisation, cue points and crossfade, given as a player's
// `filters.pluginFilters.tonearm` or to `PATCH …/players/{guildId}/tonearm`. Read and checked
// here before anything runs; a wrong field refuses the whole update.
import EngineAPI
import Foundation
import ServiceSupport

struct TonearmSettings: Sendable, Equatable {
    var normalize: Bool?
    var cue: Bool?
    var crossfadeMS: Int?

    /// The plugin's name, as `/v4/info` lists it and as `pluginFilters` keys it.
    static let pluginName = "tonearm"

    init(normalize: Bool? = nil, cue: Bool? = nil, crossfadeMS: Int? = nil) {
        self.normalize = normalize
        self.cue = cue
        self.crossfadeMS = crossfadeMS
    }

    /// `{"normalize": Bool, "cue": Bool, "crossfadeMs": 0–12000}`, each optional; other keys are
    /// refused (a misspelt setting would otherwise be ignored silently).
    init(_ object: JSONObject, field: String) throws(LavalinkError) {
        for key in object.keys where !["normalize", "cue", "crossfadeMs"].contains(key) {
            throw .badRequest("\(field).\(key) is not a Tonearm setting (normalize, cue, crossfadeMs)")
        }
        normalize = try Self.boolean(object["normalize"], "\(field).normalize")
        cue = try Self.boolean(object["cue"], "\(field).cue")
        if let value = object["crossfadeMs"] {
            guard let milliseconds = PlayerUpdate.integer(value), (0...Int64(NextRequest.maxCrossfadeMS)).contains(milliseconds) else {
                throw .badRequest("\(field).crossfadeMs must be a whole number of milliseconds from 0 to \(NextRequest.maxCrossfadeMS)")
            }
            crossfadeMS = Int(milliseconds)
        }
    }

    /// `pluginFilters` of a `filters` object: Tonearm's entry read, the others left alone (as
    /// Lavalink leaves the filters of plugins it does not have).
    static func fromPluginFilters(_ value: Any?) throws(LavalinkError) -> TonearmSettings? {
        guard let value, !(value is NSNull) else { return nil }
        guard let plugins = value as? JSONObject else { throw .badRequest("filters.pluginFilters must be an object") }
        guard let ours = plugins[pluginName], !(ours is NSNull) else { return nil }
        guard let object = ours as? JSONObject else { throw .badRequest("filters.pluginFilters.tonearm must be an object") }
        return try TonearmSettings(object, field: "filters.pluginFilters.tonearm")
    }

    /// The session commands that carry the settings given out, in a fixed order.
    var commands: [SessionCommand] {
        var commands: [SessionCommand] = []
        if let normalize { commands.append(.normalize(normalize)) }
        if let cue { commands.append(.cue(cue)) }
        if let crossfadeMS { commands.append(.crossfade(milliseconds: crossfadeMS)) }
        return commands
    }

    /// The settings a session has now, as the plugin shows them (a guild that never played has
    /// a new session's: normalisation as configured, cue points off, no crossfade).
    static func json(_ view: SessionView?, directory: SessionDirectory) -> JSONObject {
        ["normalize": view?.normalize ?? directory.normalizeByDefault, "cue": view?.cue ?? false, "crossfadeMs": view?.crossfadeMS ?? 0]
    }

    private static func boolean(_ value: Any?, _ field: String) throws(LavalinkError) -> Bool? {
        guard let value else { return nil }
        guard PlayerUpdate.isBoolean(value), let flag = value as? Bool else { throw .badRequest("\(field) must be true or false") }
        return flag
    }
}
