// `GET /health` of the engine: what an operator or compose's health check reads.
import EngineAPI
import Hummingbird
import WireProtocol

/// The engine's figures: sessions by state, the Router's link, frames, memory.
struct EngineHealth: Codable, ResponseEncodable {
    var status: String
    var version: String
    var uptimeSeconds: Double
    var sessions: [String: Int]
    var playing: Int
    var routerConnections: Int
    var frames: FrameCounters
    var droppedFrames: UInt64
    var rssBytes: Int
    /// What the engine can still take (docs/engine-api.md, "Load").
    var load: LoadReport

    enum CodingKeys: String, CodingKey {
        case status, version, sessions, playing, frames
        case uptimeSeconds = "uptime_seconds"
        case routerConnections = "router_connections"
        case droppedFrames = "dropped_frames"
        case rssBytes = "rss_bytes"
        case load
    }
}
