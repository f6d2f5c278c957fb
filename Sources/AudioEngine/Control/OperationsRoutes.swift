// `/health` and `/metrics` (Prometheus text) of the engine.
import CoreMetrics
import EngineAPI
import Foundation
import Hummingbird
import NIOCore
import Prometheus
import ServiceSupport

extension ControlAPI {
    func addOperationsRoutes(to router: Router<some RequestContext>) {
        router.get("/metrics") { _, _ -> Response in
            let metrics = manager.metrics
            for (state, count) in manager.countsByState { metrics.sessions[state]?.record(count) }
            metrics.routerConnections.record(socket.stats.connections)
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition())))
        }
        router.get("/health") { _, _ -> EngineHealth in
            let stats = socket.stats
            let counts = manager.countsByState
            return EngineHealth(
                status: "ok", version: Self.version, uptimeSeconds: Date().timeIntervalSince(startedAt),
                sessions: Dictionary(uniqueKeysWithValues: counts.map { ($0.key.rawValue, $0.value) }),
                playing: counts[.streaming] ?? 0, routerConnections: stats.connections, frames: manager.totals,
                droppedFrames: stats.droppedFrames, rssBytes: ResourceUsage.residentBytes(), load: manager.loadReport())
        }
    }
}
