// The answer to every WebSocket command.
import ServiceSupport

/// `{"type":"reply","id":…,"ok":true,"state":{…}}` or `{"type":"reply","id":…,"ok":false,"error":{…}}`.
struct CommandReply: Encodable {
    var type = "reply"
    var id: RequestID?
    var ok = false
    var state: SessionView?
    var error: ErrorBody.Detail?

    func json() -> String { JSONCoding.text(self) }
}
