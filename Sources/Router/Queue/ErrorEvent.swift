// The Router's own errors on a session's WebSocket (the engine's come as its `error` events).
import ServiceSupport

/// An error the Router itself reports to a session's clients (`{"type":"error",…}`).
struct ErrorEvent: Encodable {
    var type = "error"
    var sessionID: String
    var code: String
    var message: String

    enum CodingKeys: String, CodingKey {
        case type, code, message
        case sessionID = "session_id"
    }

    func json() -> String { JSONCoding.text(self) }
}
