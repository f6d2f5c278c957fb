// The answer to every WebSocket command.
import EngineAPI
import Foundation
import ServiceSupport

/// `{"type":"reply","id":…,"ok":true,"state":{…}}` or `{"type":"reply","id":…,"ok":false,"error":{…}}`.
struct CommandReply: Encodable {
    var type = "reply"
    var id: RequestID?
    var ok = false
    var state: SessionView?
    /// `layer` and `layer_stop`: the layer's id and settings, or that it ended.
    var layer: LayerStarted?
    var stopped: LayerStopped?
    var error: ErrorBody.Detail?

    func json() -> String { JSONCoding.text(self) }

    /// The reply refusing the command `text` (its `id` kept when it has one) with `error`.
    static func refusal(to text: String, _ error: APIError) -> String {
        var reply = CommandReply(id: (try? CommandParsing.envelope(Data(text.utf8)))?.id)
        reply.error = ErrorBody(code: error.code, message: error.message).error
        return reply.json()
    }
}
