// Reads a session command from its name and JSON arguments: the REST path
// (`POST /api/sessions/{id}/{name}` with a JSON body) and a WebSocket message
// (`{"op": name, …arguments}`) go through the same parser, so both answer the same errors.
import Foundation
import HTTPTypes
import ServiceSupport

enum CommandParsing {
    /// Every argument any command takes; which are required depends on the command.
    struct Arguments: Decodable, Sendable {
        var url: String?
        var index: Int?
        var position_ms: Int64?
        var volume: Int?
        var mode: String?
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

    /// The command `name` with its arguments.
    static func command(_ name: String, arguments json: Arguments) throws(APIError) -> SessionCommand {
        switch name {
        case "play": return .play(url: try url(json))
        case "queue": return .enqueue(url: try url(json))
        case "remove": return .remove(index: try required(json.index, "index"))
        case "clear": return .clear
        case "jump": return .jump(index: try required(json.index, "index"))
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
        case "loop":
            guard let raw = json.mode, let mode = LoopMode(rawValue: raw) else {
                throw .badRequest("invalid_loop_mode", "mode must be \"off\", \"track\" or \"queue\"")
            }
            return .loop(mode)
        case "shuffle": return .shuffle
        default:
            throw APIError(
                status: .notFound, code: "unknown_command",
                message:
                    "no command \"\(name)\"; commands: play, queue, remove, clear, jump, next, previous, pause, resume, stop, seek, volume, loop, shuffle")
        }
    }

    /// Arguments from a JSON body; an empty body has none.
    static func arguments(_ data: Data) throws(APIError) -> Arguments {
        guard data.contains(where: { !($0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09) }) else {
            return Arguments()
        }
        do {
            return try JSONDecoder().decode(Arguments.self, from: data)
        } catch let DecodingError.typeMismatch(_, context) {
            let field = context.codingPath.first?.stringValue ?? "body"
            throw .badRequest("invalid_\(field)", "\(field) has the wrong type: \(context.debugDescription)")
        } catch {
            throw .badRequest("invalid_json", "the body must be a JSON object")
        }
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
