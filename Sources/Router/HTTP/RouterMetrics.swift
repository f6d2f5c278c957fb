// What the Router counts for operators, through swift-metrics into a Prometheus registry that
// `/metrics` renders. The packet path counts with plain integers it keeps anyway (the store's
// counters, the engine link's status); each scrape carries what changed since the last one into
// the metrics, so routing a frame costs nothing more for being measured.
import CoreMetrics
import Prometheus
import ServiceSupport
import Synchronization

/// The Router's metrics.
final class RouterMetrics: Sendable {
    /// The figures a scrape reads.
    struct Reading: Sendable {
        var counters: SessionStore.Counters
        var link: EngineLink.Status
        var storage: PersistenceWriter.Status
        var staleSessionsReleased: UInt64
        var sessions: Int
        var clients: [ClientKind: Int]
        var relays = Relays()
    }

    /// What a Router of a cluster relays (all 0 outside one).
    struct Relays: Sendable {
        /// Clients here whose session plays on another pair.
        var clients = 0
        /// Their upstreams to the owners: one per session, path and frames per message.
        var upstreams = 0
        /// Stations another pair plays, relayed here to their followers (one upstream each).
        var stations = 0
        /// Other Routers' relays of the stations played here.
        var served = 0
    }

    private let registry = PrometheusCollectorRegistry()
    private let clients: [ClientKind: CoreMetrics.Gauge]
    private let sessions: CoreMetrics.Gauge
    private let framesRouted: CoreMetrics.Counter
    private let staleFrames: CoreMetrics.Counter
    private let slowClientFrames: CoreMetrics.Counter
    private let slowClientDisconnects: CoreMetrics.Counter
    private let engineConnects: CoreMetrics.Counter
    private let engineConnected: CoreMetrics.Gauge
    private let engineProtocolErrors: CoreMetrics.Counter
    private let staleSessionsReleased: CoreMetrics.Counter
    private let storageOK: CoreMetrics.Gauge
    private let storageUnsaved: CoreMetrics.Gauge
    private let storageFailures: CoreMetrics.Counter
    private let relayedClients: CoreMetrics.Gauge
    private let relayUpstreams: CoreMetrics.Gauge
    private let stationRelays: CoreMetrics.Gauge
    private let stationRelaysServed: CoreMetrics.Gauge
    /// The counter values the metrics hold, as of the last scrape.
    private let recorded = Mutex<[String: UInt64]>([:])

    /// The help line of each family (docs/router-api.md has the same table).
    static let help = MetricHelp([
        "tonearm_router_clients": "Connected clients by kind.",
        "tonearm_router_sessions": "Sessions the Router holds in memory.",
        "tonearm_router_frames_routed_total": "Opus frames handed to a session's clients.",
        "tonearm_router_frames_dropped_total":
            "Frames dropped: stale (no such session at the Router) or slow_client (a client's queue was full).",
        "tonearm_router_slow_client_disconnects_total": "Clients disconnected for staying behind.",
        "tonearm_router_engine_connects_total": "Successful connections to the engine socket (reconnects = this - 1).",
        "tonearm_router_engine_connected": "1 while the engine link is up.",
        "tonearm_router_engine_protocol_errors_total": "Engine links closed for a protocol error.",
        "tonearm_router_stale_sessions_released_total": "Sessions released after the stale-session timeout.",
        "tonearm_router_storage_ok": "1 while sessions are stored as they change; 0 while the disk refuses writes (full, read-only).",
        "tonearm_router_storage_unsaved_sessions": "Sessions whose newest state waits to be stored.",
        "tonearm_router_storage_write_failures_total": "Writes of session state the disk refused (each is tried again).",
        "tonearm_router_relayed_clients": "In a cluster: clients here whose session plays on another pair.",
        "tonearm_router_relay_upstreams": "In a cluster: the relayed clients' upstreams to the owners, one per session, path and frames per message.",
        "tonearm_router_station_relays": "In a cluster: stations another pair plays, relayed here to their followers (one upstream each).",
        "tonearm_router_station_relays_served": "In a cluster: other Routers' relays of the stations played here.",
    ])

    init() {
        let factory = PrometheusMetricsFactory(registry: registry)
        clients = Dictionary(
            uniqueKeysWithValues: ClientKind.allCases.map {
                ($0, CoreMetrics.Gauge(label: "tonearm_router_clients", dimensions: [("kind", $0.rawValue)], factory: factory))
            })
        sessions = CoreMetrics.Gauge(label: "tonearm_router_sessions", factory: factory)
        framesRouted = CoreMetrics.Counter(label: "tonearm_router_frames_routed_total", factory: factory)
        staleFrames = CoreMetrics.Counter(
            label: "tonearm_router_frames_dropped_total", dimensions: [("cause", "stale")], factory: factory)
        slowClientFrames = CoreMetrics.Counter(
            label: "tonearm_router_frames_dropped_total", dimensions: [("cause", "slow_client")], factory: factory)
        slowClientDisconnects = CoreMetrics.Counter(label: "tonearm_router_slow_client_disconnects_total", factory: factory)
        engineConnects = CoreMetrics.Counter(label: "tonearm_router_engine_connects_total", factory: factory)
        engineConnected = CoreMetrics.Gauge(label: "tonearm_router_engine_connected", factory: factory)
        engineProtocolErrors = CoreMetrics.Counter(label: "tonearm_router_engine_protocol_errors_total", factory: factory)
        staleSessionsReleased = CoreMetrics.Counter(label: "tonearm_router_stale_sessions_released_total", factory: factory)
        storageOK = CoreMetrics.Gauge(label: "tonearm_router_storage_ok", factory: factory)
        storageUnsaved = CoreMetrics.Gauge(label: "tonearm_router_storage_unsaved_sessions", factory: factory)
        storageFailures = CoreMetrics.Counter(label: "tonearm_router_storage_write_failures_total", factory: factory)
        relayedClients = CoreMetrics.Gauge(label: "tonearm_router_relayed_clients", factory: factory)
        relayUpstreams = CoreMetrics.Gauge(label: "tonearm_router_relay_upstreams", factory: factory)
        stationRelays = CoreMetrics.Gauge(label: "tonearm_router_station_relays", factory: factory)
        stationRelaysServed = CoreMetrics.Gauge(label: "tonearm_router_station_relays_served", factory: factory)
    }

    /// Records `reading` and answers the Prometheus text exposition.
    func exposition(_ reading: Reading) -> [UInt8] {
        for kind in ClientKind.allCases { clients[kind]?.record(reading.clients[kind] ?? 0) }
        sessions.record(reading.sessions)
        engineConnected.record(reading.link.connected ? 1 : 0)
        storageOK.record(reading.storage.ok ? 1 : 0)
        storageUnsaved.record(reading.storage.unsaved)
        relayedClients.record(reading.relays.clients)
        relayUpstreams.record(reading.relays.upstreams)
        stationRelays.record(reading.relays.stations)
        stationRelaysServed.record(reading.relays.served)
        recorded.withLock { recorded in
            func advance(_ counter: CoreMetrics.Counter, _ key: String, to value: UInt64) {
                let last = recorded[key] ?? 0
                guard value > last else { return }
                counter.increment(by: Int64(clamping: value - last))
                recorded[key] = value
            }
            advance(framesRouted, "routed", to: reading.counters.framesRouted)
            advance(staleFrames, "stale", to: reading.counters.unknownSessionFrames)
            advance(slowClientFrames, "slow", to: reading.counters.slowClientDrops)
            advance(slowClientDisconnects, "disconnects", to: reading.counters.slowClientDisconnects)
            advance(engineConnects, "connects", to: reading.link.connects)
            advance(engineProtocolErrors, "protocol", to: reading.link.protocolErrors)
            advance(staleSessionsReleased, "released", to: reading.staleSessionsReleased)
            advance(storageFailures, "storage", to: reading.storage.failures)
        }
        return Self.help.annotate(registry.emitToBuffer())
    }
}
