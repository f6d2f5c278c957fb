// What the engine counts for operators, through swift-metrics. `main` hands it the Prometheus
// factory whose registry `/metrics` renders; tests may pass any other factory.
import CoreMetrics
import EngineAPI
import Prometheus
import ServiceSupport

/// The engine's metrics.
package struct EngineMetrics: Sendable {
    let framesSent: CoreMetrics.Counter
    let framesNulled: CoreMetrics.Counter
    let framesDeficit: CoreMetrics.Counter
    /// Ticks the pacer reached a whole interval or more late and ran at once after the one before.
    let ticksCaughtUp: CoreMetrics.Counter
    let encodeTime: CoreMetrics.Timer
    let sourceErrors: CoreMetrics.Counter
    let sourceReconnects: CoreMetrics.Counter
    /// Compressed packets from a source that were not valid Opus (or too large for a frame),
    /// skipped rather than played.
    let sourcePacketsSkipped: CoreMetrics.Counter
    let droppedFrames: CoreMetrics.Counter
    let routerConnections: CoreMetrics.Gauge
    let sessions: [SessionState: CoreMetrics.Gauge]
    /// The load governor's figures: the complexity transcoding sessions encode at and the frames
    /// they encode ahead, the CPU budget and what was used over the last second (cores), plays
    /// refused for the budget, transcoding and passed-through plays, and how many more
    /// transcoding plays fit.
    let opusComplexity: CoreMetrics.Gauge
    let encodeLead: CoreMetrics.Gauge
    let cpuBudget: CoreMetrics.Gauge
    let cpuUsed: CoreMetrics.Gauge
    let admissionRefusals: CoreMetrics.Counter
    let playsByKind: [String: CoreMetrics.Gauge]
    let headroom: CoreMetrics.Gauge
    /// Renders the Prometheus text exposition, when the factory is Prometheus.
    let registry: PrometheusCollectorRegistry?

    package init(factory: any MetricsFactory = NOOPMetricsHandler.instance, registry: PrometheusCollectorRegistry? = nil) {
        framesSent = CoreMetrics.Counter(label: "tonearm_engine_frames_sent_total", factory: factory)
        framesNulled = CoreMetrics.Counter(label: "tonearm_engine_frames_nulled_total", factory: factory)
        framesDeficit = CoreMetrics.Counter(label: "tonearm_engine_frames_deficit_total", factory: factory)
        ticksCaughtUp = CoreMetrics.Counter(label: "tonearm_engine_ticks_caught_up_total", factory: factory)
        encodeTime = CoreMetrics.Timer(label: "tonearm_engine_encode_seconds", preferredDisplayUnit: .seconds, factory: factory)
        sourceErrors = CoreMetrics.Counter(label: "tonearm_engine_source_errors_total", factory: factory)
        sourceReconnects = CoreMetrics.Counter(label: "tonearm_engine_source_reconnects_total", factory: factory)
        sourcePacketsSkipped = CoreMetrics.Counter(label: "tonearm_engine_source_packets_skipped_total", factory: factory)
        droppedFrames = CoreMetrics.Counter(label: "tonearm_engine_router_dropped_frames_total", factory: factory)
        routerConnections = CoreMetrics.Gauge(label: "tonearm_engine_router_connections", factory: factory)
        sessions = Dictionary(
            uniqueKeysWithValues: SessionState.allCases.map {
                ($0, CoreMetrics.Gauge(label: "tonearm_engine_sessions", dimensions: [("state", $0.rawValue)], factory: factory))
            })
        opusComplexity = CoreMetrics.Gauge(label: "tonearm_engine_opus_complexity", factory: factory)
        encodeLead = CoreMetrics.Gauge(label: "tonearm_engine_encode_lead_frames", factory: factory)
        cpuBudget = CoreMetrics.Gauge(label: "tonearm_engine_cpu_budget_cores", factory: factory)
        cpuUsed = CoreMetrics.Gauge(label: "tonearm_engine_cpu_used_cores", factory: factory)
        admissionRefusals = CoreMetrics.Counter(label: "tonearm_engine_admission_refusals_total", factory: factory)
        playsByKind = Dictionary(
            uniqueKeysWithValues: ["transcoding", "passthrough"].map {
                ($0, CoreMetrics.Gauge(label: "tonearm_engine_plays", dimensions: [("kind", $0)], factory: factory))
            })
        headroom = CoreMetrics.Gauge(label: "tonearm_engine_headroom_sessions", factory: factory)
        self.registry = registry
    }

    /// The help line of each family (docs/engine-api.md has the same table).
    static let help = MetricHelp([
        "tonearm_engine_frames_sent_total": "Frames written at their deadline.",
        "tonearm_engine_frames_nulled_total": "Deadlines at which a streaming session had no frame ready.",
        "tonearm_engine_frames_deficit_total": "Deadlines the engine itself missed while sessions were streaming.",
        "tonearm_engine_ticks_caught_up_total": "Ticks the pacer reached a whole interval late and ran at once, keeping the streams on time.",
        "tonearm_engine_encode_seconds": "Time to encode one 20 ms frame.",
        "tonearm_engine_source_errors_total": "Plays that ended in error.",
        "tonearm_engine_source_reconnects_total": "Reconnects of network sources.",
        "tonearm_engine_source_packets_skipped_total": "Packets of an Opus source that were not valid Opus, skipped.",
        "tonearm_engine_router_dropped_frames_total": "Frames a slow Router connection did not get.",
        "tonearm_engine_router_connections": "Router connections on the socket.",
        "tonearm_engine_sessions": "Sessions by state.",
        "tonearm_engine_opus_complexity": "The Opus complexity transcoding sessions encode at now (lowered under load).",
        "tonearm_engine_encode_lead_frames": "Frames transcoding sessions encode ahead of the clock now (deepened where frames came late).",
        "tonearm_engine_cpu_budget_cores": "CPU the engine may use for its sessions now, in cores: its budget less the share the hypervisor takes (0: no admission control).",
        "tonearm_engine_cpu_used_cores": "CPU the engine used over the last second, in cores.",
        "tonearm_engine_admission_refusals_total": "Plays refused with engine_full: they did not fit in the CPU budget.",
        "tonearm_engine_plays": "Plays being heard or opening, by kind (transcoding or passthrough).",
        "tonearm_engine_headroom_sessions": "Transcoding plays that still fit in the CPU budget.",
    ])

    /// The Prometheus text exposition, with help lines; empty unless the factory is Prometheus.
    func exposition() -> [UInt8] {
        Self.help.annotate(registry?.emitToBuffer() ?? [])
    }

    /// A Prometheus-backed set: the registry renders what the metrics record.
    static func prometheus() -> EngineMetrics {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [
            .microseconds(50), .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1),
            .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(20),
        ]
        return EngineMetrics(factory: factory, registry: registry)
    }
}
