// What operators read: `/health` (the engine link, storage, sessions, clients, memory),
// `/health/session/{id}` (one session's clients and frames) and `/metrics` (Prometheus text).
import Foundation
import Hummingbird
import NIOCore
import ServiceSupport
import WireProtocol

struct OperationsRoutes {
    let store: SessionStore
    let directory: SessionDirectory
    let link: EngineLink
    let storage: PersistenceWriter?
    let startedAt: Date
    let recorder: RouterMetrics
    /// In a cluster: this pair's membership, and what its Router relays.
    var relay: ClusterRelay? = nil
    var stations: StationRelays? = nil

    struct Health: ResponseEncodable {
        struct Engine: Codable {
            var connected: Bool
            var connects: UInt64
            var protocolErrors: UInt64
            var lastError: String?
            /// The engine's last load report (its `load` event).
            var load: LoadReport?
            enum CodingKeys: String, CodingKey {
                case connected, connects, load
                case protocolErrors = "protocol_errors"
                case lastError = "last_error"
            }
        }
        struct Storage: Codable {
            var ok: Bool
            var unsavedSessions: Int
            var failures: UInt64
            var lastError: String?
            enum CodingKeys: String, CodingKey {
                case ok, failures
                case unsavedSessions = "unsaved_sessions"
                case lastError = "last_error"
            }
        }
        var status: String
        var uptimeSeconds: Double
        var engine: Engine
        var storage: Storage
        var activeSessions: Int
        var activeClients: Int
        var clients: [String: Int]
        var framesRouted: UInt64
        var unknownSessionFrames: UInt64
        var slowClientDrops: UInt64
        var slowClientDisconnects: UInt64
        var rssBytes: Int
        var cluster: ClusterMember.Report?
        enum CodingKeys: String, CodingKey {
            case status, engine, clients, storage, cluster
            case uptimeSeconds = "uptime_seconds"
            case activeSessions = "active_sessions"
            case activeClients = "active_clients"
            case framesRouted = "frames_routed"
            case unknownSessionFrames = "unknown_session_frames"
            case slowClientDrops = "slow_client_drops"
            case slowClientDisconnects = "slow_client_disconnects"
            case rssBytes = "rss_bytes"
        }
    }

    struct SessionHealth: ResponseEncodable {
        var sessionID: String
        var known: Bool
        var status: String?
        var clients: [SessionStore.ClientInfo]
        var framesRouted: UInt64
        enum CodingKeys: String, CodingKey {
            case known, status, clients
            case sessionID = "session_id"
            case framesRouted = "frames_routed"
        }
    }

    func addRoutes(to router: Router<TonearmRequestContext>) {
        router.get("/health") { _, _ -> Health in
            let status = link.status
            let counters = store.counters
            let stored = storage?.status ?? .init()
            var membership = relay?.member.report
            if let relays {
                membership?.relayedClients = relays.clients
                membership?.relayUpstreams = relays.upstreams
                membership?.stationRelays = relays.stations
                membership?.stationRelaysServed = relays.served
            }
            return Health(
                status: status.connected && stored.ok && membership?.ok != false ? "ok" : "degraded", uptimeSeconds: Date().timeIntervalSince(startedAt),
                engine: .init(
                    connected: status.connected, connects: status.connects, protocolErrors: status.protocolErrors,
                    lastError: status.lastError, load: store.engineLoad),
                storage: .init(ok: stored.ok, unsavedSessions: stored.unsaved, failures: stored.failures, lastError: stored.error),
                activeSessions: store.sessionCount, activeClients: store.clientCount,
                clients: Dictionary(uniqueKeysWithValues: store.clientsByKind.map { ($0.key.rawValue, $0.value) }),
                framesRouted: counters.framesRouted, unknownSessionFrames: counters.unknownSessionFrames,
                slowClientDrops: counters.slowClientDrops, slowClientDisconnects: counters.slowClientDisconnects,
                rssBytes: ResourceUsage.residentBytes(), cluster: membership)
        }
        router.get("/health/session/:id") { _, context -> SessionHealth in
            let id = try RouterApplication.sessionID(context)
            let entry = store.findBySessionId(id)
            let status = await directory.existing(id)?.state.status
            return SessionHealth(
                sessionID: id.description, known: entry != nil, status: status, clients: store.clients(of: id),
                framesRouted: entry?.framesRouted ?? 0)
        }
        router.get("/metrics") { _, _ -> Response in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: await metrics())))
        }
    }

    /// The Prometheus text exposition (`RouterMetrics`).
    func metrics() async -> [UInt8] {
        let reading = RouterMetrics.Reading(
            counters: store.counters, link: link.status, storage: storage?.status ?? .init(),
            staleSessionsReleased: await directory.released, sessions: store.sessionCount, clients: store.clientsByKind,
            relays: relays ?? .init())
        return recorder.exposition(reading)
    }

    /// What this Router relays, in a cluster (nil outside one).
    var relays: RouterMetrics.Relays? {
        guard let relay else { return nil }
        return .init(
            clients: relay.upstreams.clientCount, upstreams: relay.upstreams.upstreamCount, stations: stations?.count ?? 0, served: store.remoteFollowerCount)
    }
}
