// Reads a session command from its name and JSON arguments: the REST path
// (`POST /api/sessions/{id}/{name}` with a JSON body) and a WebSocket message
// (`{"op": name, …arguments}`) go through the same parser, so both answer the same errors.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import WireProtocol

enum CommandParsing {
    /// Every argument any command takes; which are required depends on the command.
    struct Arguments: Decodable, Sendable {
        var url: String?
        var index: Int?
        var position_ms: Int64?
        var volume: Int?
        var mode: String?
        var enabled: Bool?
        var crossfade_ms: Int?
        /// `follow`: the station, and a token that may hear it (its listen token) for a caller
        /// that may not already.
        var station: String?
        var token: String?
        /// `filters`: Lavalink v4's filter objects (`equalizer`, `karaoke`, `tremolo`, …) beside
        /// the other arguments, read from the same JSON object.
        var filters = Filters()

        private enum CodingKeys: String, CodingKey { case url, index, position_ms, volume, mode, enabled, crossfade_ms, station, token }

        init() {}

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            url = try container.decodeIfPresent(String.self, forKey: .url)
            index = try container.decodeIfPresent(Int.self, forKey: .index)
            position_ms = try container.decodeIfPresent(Int64.self, forKey: .position_ms)
            volume = try container.decodeIfPresent(Int.self, forKey: .volume)
            mode = try container.decodeIfPresent(String.self, forKey: .mode)
            enabled = try container.decodeIfPresent(Bool.self, forKey: .enabled)
            crossfade_ms = try container.decodeIfPresent(Int.self, forKey: .crossfade_ms)
            station = try container.decodeIfPresent(String.self, forKey: .station)
            token = try container.decodeIfPresent(String.self, forKey: .token)
            filters = try Filters(from: decoder)
        }
    }

    /// A WebSocket command: `op` names it, `id` (a number or string, optional) comes back in the reply.
    struct Envelope: Decodable {
        var op: String
        var id: RequestID?
    }

    /// The envelope of a WebSocket message; its arguments are read from the same bytes.
    static func envelope(_ data: Data) throws(APIError) -> Envelope {
        do {
            return try JSONDecoder().decode(Envelope.self, from: data)
        } catch {
            throw .badRequest("invalid_json", "a command is a JSON object such as {\"op\":\"play\",\"url\":\"…\",\"id\":1}")
        }
    }

    /// Every command's name, as REST paths and WebSocket `op`s spell it.
    static let names = [
        "play", "queue", "remove", "clear", "jump", "next", "previous", "pause", "resume", "stop", "seek", "volume",
        "filters", "normalize", "cue", "crossfade", "loop", "shuffle", "follow", "unfollow",
    ]

    /// The command `name` with its arguments.
    static func command(_ name: String, arguments json: Arguments) throws(APIError) -> SessionCommand {
        switch name {
        case "play": return .play(url: try url(json))
        case "queue": return .enqueue(url: try url(json))
        case "remove": return .remove(index: try index(json))
        case "clear": return .clear
        case "jump": return .jump(index: try index(json))
        case "next": return .next
        case "previous": return .previous
        case "pause": return .pause
        case "resume": return .resume
        case "stop": return .stop
        case "seek":
            let position = try required(json.position_ms, "position_ms")
            guard position >= 0 else { throw .badRequest("invalid_position", "position_ms must be 0 or more") }
            return .seek(positionMS: position)
        case "volume": return .volume(try required(json.volume, "volume"))
        case "filters": return .filters(json.filters)
        case "normalize": return .normalize(try required(json.enabled, "enabled"))
        case "cue": return .cue(try required(json.enabled, "enabled"))
        case "crossfade": return .crossfade(milliseconds: try required(json.crossfade_ms, "crossfade_ms"))
        case "loop":
            guard let raw = json.mode, let mode = LoopMode(rawValue: raw) else {
                throw .badRequest("invalid_loop_mode", "mode must be \"off\", \"track\" or \"queue\"")
            }
            return .loop(mode)
        case "shuffle": return .shuffle
        case "follow":
            let station = try required(json.station, "station")
            do {
                return .follow(station: try SessionID(station))
            } catch {
                throw .badRequest("invalid_station", "station is a session id: 1 to 24 printable ASCII characters, no spaces")
            }
        case "unfollow": return .unfollow
        default:
            throw APIError(
                status: .notFound, code: "unknown_command",
                message: "no command \"\(name)\"; commands: \(names.joined(separator: ", "))")
        }
    }

    /// Arguments from a JSON body; an empty body has none.
    static func arguments(_ data: Data) throws(APIError) -> Arguments {
        guard data.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else {
            return Arguments()
        }
        do {
            return try JSONDecoder().decode(Arguments.self, from: data)
        } catch let error as DecodingError where error.filterProblem != nil {
            throw .badRequest("invalid_filters", error.filterProblem ?? "")
        } catch let DecodingError.typeMismatch(_, context) where !context.codingPath.isEmpty {
            let field = context.codingPath[0].stringValue
            throw .badRequest("invalid_\(field)", "\(field) has the wrong type: \(context.debugDescription)")
        } catch DecodingError.dataCorrupted {
            // Foundation's decoder calls a number beyond 64 bits invalid JSON; name the field.
            if let field = outOfRangeField(data) {
                throw .badRequest(field.code, "\(field.name) is out of range")
            }
            throw .badRequest("invalid_json", "the body must be a JSON object")
        } catch {
            throw .badRequest("invalid_json", "the body must be a JSON object")
        }
    }

    /// The numeric argument of `data` (a JSON object) that no 64-bit integer holds, with the code
    /// its refusal has elsewhere.
    private static func outOfRangeField(_ data: Data) -> (name: String, code: String)? {
        let beyond = JSONCoding.fieldsBeyond64Bits(in: data)
        let fields = [("index", "invalid_index"), ("position_ms", "invalid_position"), ("volume", "invalid_volume")]
        if let field = fields.first(where: { name, _ in beyond.contains(name) }) { return (name: field.0, code: field.1) }
        // The equalizer's entries are objects of their own.
        let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        let entries = (object?["equalizer"] as? [Any]) ?? []
        let inEqualizer = entries.contains { entry in
            guard let entry = entry as? [String: Any], let data = try? JSONSerialization.data(withJSONObject: entry) else {
                return false
            }
            return !JSONCoding.fieldsBeyond64Bits(in: data).isEmpty
        }
        return inEqualizer ? (name: "an equalizer band", code: "invalid_filters") : nil
    }

    /// A queue position: 0 to 999 (a queue holds at most 1,000 tracks). One inside that range
    /// that the queue does not have now is the queue's refusal (409), not a malformed request.
    static func queueIndex(_ index: Int) throws(APIError) -> Int {
        guard (0..<SessionController.maxQueueLength).contains(index) else {
            throw .badRequest(
                "invalid_index", "index is a queue position from 0 to \(SessionController.maxQueueLength - 1), got \(index)")
        }
        return index
    }

    private static func index(_ json: Arguments) throws(APIError) -> Int {
        try queueIndex(try required(json.index, "index"))
    }

    private static func url(_ json: Arguments) throws(APIError) -> String {
        let url = (json.url ?? "").trimmingCharacters(in: .whitespaces)
        guard !url.isEmpty else {
            throw .badRequest("missing_url", "give the track as {\"url\": \"…\"}: a file name, an http(s) URL or a page URL")
        }
        guard url.utf8.count <= 4096 else { throw .badRequest("invalid_url", "the URL is longer than 4096 bytes") }
        return url
    }

    private static func required<T>(_ value: T?, _ key: String) throws(APIError) -> T {
        guard let value else { throw .badRequest("missing_\(key)", "\(key) is required") }
        return value
    }
}

