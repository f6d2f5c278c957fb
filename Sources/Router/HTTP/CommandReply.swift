// The answer to every WebSocket command.
import EngineAPI
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
}
