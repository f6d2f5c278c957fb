// The Router's own errors on a session's WebSocket (the engine's come as its `error` events).
import ServiceSupport

/// An error the Router itself reports to a session's clients (`{"type":"error",…}`).
struct ErrorEvent: Encodable {
    var type = "error"
    var sessionID: String
    var code: String
    var message: String
    /// The URL it is about, when a track resolved after its command was answered failed.
    var url: String? = nil

    enum CodingKeys: String, CodingKey {
        case type, code, message, url
        case sessionID = "session_id"
    }

    func json() -> String { JSONCoding.text(self) }
}
