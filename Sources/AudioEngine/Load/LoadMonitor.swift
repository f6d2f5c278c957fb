// Once a second: what the engine's CPU and its sessions did, and the host's time the hypervisor
// took (`/proc/stat`), into the load governor; a `load`
// event on the wire with the report after the first second, every 10 s, when the complexity
// changes, and when a Router has connected since the last (a cluster places sessions by it: a
// Router without its engine's report would judge its pair by the host's load until then).
import CoreMetrics
import EngineAPI
import Foundation
import Logging
import ServiceLifecycle
import ServiceSupport
import WireProtocol

/// Measures the engine for its load governor while the service runs.
struct LoadMonitor: Service {
    let manager: SessionManager
    let control: LoadControl
    var interval: Duration = .seconds(1)
    /// Samples between two `load` events.
    var eventEvery = 10
    /// How many Routers have connected to the engine's socket so far.
    var routerConnections: @Sendable () -> Int = { 0 }
    let logger: Logger

    func run() async throws {
        let clock = ContinuousClock()
        var previous = manager.loadCounts()
        var previousCPU = ResourceUsage.cpuSeconds()
        var previousHost = ResourceUsage.hostCPUTicks()
        var previousAt = clock.now
        var samples = 0
        var connectionsReported = routerConnections()
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: interval)
            guard !Task.isCancelled && !Task.isShuttingDownGracefully else { break }
            let now = clock.now
            let counts = manager.loadCounts()
            let cpu = ResourceUsage.cpuSeconds()
            let host = ResourceUsage.hostCPUTicks()
            let seconds = Self.seconds(now - previousAt)
            guard seconds > 0 else { continue }
            let sample = LoadGovernor.Sample(
                at: SessionManager.monotonicSeconds(), cpu: (cpu - previousCPU) / seconds, transcoding: counts.transcoding,
                passthrough: counts.passthrough, transcodingBefore: previous.transcoding,
                passthroughBefore: previous.passthrough, tight: counts.tight &- previous.tight,
                late: counts.late &- previous.late, transcodedFrames: counts.transcodedFrames &- previous.transcodedFrames,
                layers: counts.layers, layersBefore: previous.layers,
                stolen: ResourceUsage.stolenShare(from: previousHost, to: host))
            previous = counts
            previousCPU = cpu
            previousHost = host
            previousAt = now
            samples += 1
            let leadBefore = control.render.lead
            let changed = control.observe(sample)
            if control.render.lead != leadBefore {
                logger.notice(
                    "frames encoded ahead changed",
                    metadata: ["lead": "\(control.render.lead)", "late": "\(sample.late)", "cpu.cores": "\(sample.cpu)"])
            }
            let report = control.report(transcoding: counts.transcoding, passthrough: counts.passthrough, layers: counts.layers)
            manager.metrics.playsByKind["transcoding"]?.record(counts.transcoding)
            manager.metrics.playsByKind["passthrough"]?.record(counts.passthrough)
            manager.metrics.headroom.record(report.headroomSessions)
            if changed {
                logger.notice(
                    "opus complexity changed",
                    metadata: [
                        "complexity": "\(report.complexity)", "cpu.cores": "\(sample.cpu)",
                        "transcoding": "\(counts.transcoding)", "late": "\(sample.late)", "tight": "\(sample.tight)",
                    ])
            }
            let connections = routerConnections()
            defer { connectionsReported = connections }
            if changed || samples == 1 || samples % max(eventEvery, 1) == 0 || connections != connectionsReported {
                manager.enqueue(WireEvent(type: .load, sessionID: .engine, load: report))
            }
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
