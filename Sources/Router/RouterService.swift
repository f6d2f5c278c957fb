// The Router's services wired together: the executable runs them through here.
import AsyncHTTPClient
import Foundation
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import ServiceSupport
import UnixSignals
import WireProtocol

/// Wires the Router's parts together.
package enum RouterService {
    package static func run(configuration: RouterConfiguration, logger: Logger) async throws {
        let store = SessionStore(clientBufferFrames: configuration.clientBufferFrames)
        let engine = EngineClient(baseURL: configuration.engineURL)
        var clusterServices: [ServiceGroupConfiguration.ServiceConfiguration] = []
        var member: ClusterMember?
        let database: any SessionStorage
        if let cluster = configuration.cluster {
            let hosts = try DatabaseHosts(url: cluster.databaseURL, connectTimeout: .seconds(1), logger: logger)
            let clusterMember = ClusterMember(settings: cluster, hosts: hosts, logger: logger)
            member = clusterMember
            database = ClusterStorage(member: clusterMember)
            clusterServices = [.init(service: clusterMember)]
        } else {
            database = try SessionDatabase(path: configuration.database)
        }
        let writer = PersistenceWriter(database: database, logger: logger)
        let background = BackgroundTasks()
        let directory = SessionDirectory(
            store: store, engine: engine, database: database, writer: writer, background: background, logger: logger,
            browserPlays: configuration.browserPlays, normalizeByDefault: configuration.normalizeByDefault,
            clustered: configuration.cluster != nil)
        let secret = try IdentityTokens.secret(configured: configuration.tokenSecret, directory: configuration.dataDirectory)
        let tokens = IdentityTokens(secret: secret)
        let relay = member.map { ClusterRelay(member: $0, http: HTTPClient.shared, logger: logger) }
        // Before any controller is made: each reads them once.
        if let member { await directory.onFull { id, snapshot in await member.moveForRoom(id, snapshot) } }
        let stations = relay.map { StationRelays(relay: $0, store: store, tokens: tokens, logger: logger) }
        if let stations {
            await directory.onStations { station async throws(APIError) -> Placement in try await stations.attach(station) }
        }
        await directory.restore()
        if let member {
            member.attach(directory)
            member.readLoad { [store] in store.engineLoad }
            // An engine slower than this to take a fence is in trouble anyway; a play of a session
            // its fence does not name yet would be refused.
            let patience = TimeAmount.nanoseconds(Int64(ClusterDatabase.seconds(member.settings.fenceMargin) * 1e9))
            member.sendFences { [logger] fence in
                do throws(APIError) {
                    _ = try await engine.fence(fence, timeout: patience)
                } catch {
                    logger.warning("the engine did not take this pair's fence", metadata: ["error": "\(error.message)"])
                }
            }
            await directory.onRelease { id in await member.released(id) }
        }
        let (events, eventSink) = AsyncStream<WireEvent>.makeStream()
        store.forwardEvents(to: eventSink)
        let owns = member.map(Self.ownership)
        let link = EngineLink(path: configuration.socketPath, store: store, logger: logger) {
            await EngineReconciliation.run(
                store: store, directory: directory, engine: engine, logger: logger,
                owns: owns)
        }
        let access = AccessControl(tokens: tokens, botToken: configuration.botToken)
        var api = RouterApplication(store: store, directory: directory, link: link, engine: engine, access: access)
        api.storage = writer
        if configuration.identityPerMinute > 0 {
            api.identityLimit = RateLimiter(perMinute: configuration.identityPerMinute, burst: configuration.identityBurst)
        }
        api.clientAddress = ClientAddress(trustedProxies: configuration.trustedProxies)
        api.relay = relay
        api.stations = stations
        let hls = HLSOutput(store: store)
        api.hls = hls
        let voice = VoiceConnections(
            store: store, trustRoots: configuration.voiceTrustRoots, daveSocket: configuration.daveSocket, logger: logger)
        api.voice = voice
        let lavalink = configuration.lavalinkPassword.map { password in
            LavalinkNode(
                password: password, playerUpdateInterval: configuration.lavalinkPlayerUpdateInterval,
                statsInterval: configuration.lavalinkStatsInterval, store: store, directory: directory,
                commands: SessionCommands(directory: directory, link: link, engine: engine), engine: engine, voice: voice,
                logger: logger, cluster: relay.map { LavalinkCluster(relay: $0, password: password, logger: logger) })
        }
        if let lavalink, let member { member.onAdopted { guild in await lavalink.adopted(guild) } }
        api.lavalink = lavalink
        var answers = HLSFastAnswers(hls: hls, access: access)
        if let member { answers.playsHere = { member.epoch(of: $0) != nil } }
        let fastHLS = answers
        let router = api.makeRouter(publicDirectory: publicDirectory())
        let tls = try configuration.tlsConfiguration()
        if tls != nil { logger.info("serving HTTPS", metadata: ["certificate": "\(configuration.tlsCertificatePath ?? "")"]) }
        let (headTimeout, idleTimeout) = (configuration.headerTimeout, configuration.idleTimeout)
        let webSockets = router.buildResponder()
        // HTTP/1 with the WebSocket upgrade, request-head deadlines in front (after TLS, if any),
        // HLS files in memory answered before the routes.
        let server = HTTPServerBuilder { responder in
            let http = HTTP1WebSocketUpgradeChannel(
                responder: responder, webSocketResponder: webSockets,
                configuration: .init(
                    http1: .init(additionalChannelHandlers: [
                        NextRequestDeadline(timeout: idleTimeout), HLSFastPath(answers: fastHLS),
                    ]),
                    ws: .init(maxFrameSize: 1 << 16, autoPing: .enabled(timePeriod: configuration.pingInterval))))
            let guarded = RequestDeadlineChannel(base: http, headTimeout: headTimeout)
            return try tls.map { try TLSChannel(guarded, tlsConfiguration: $0) } ?? guarded
        }
        let app = Application(
            router: router,
            server: server,
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "tonearm-router"),
            logger: logger)
        let upkeep = SessionUpkeep(
            directory: directory, events: events, staleAfter: configuration.staleSessionTimeout,
            sweepEvery: min(configuration.staleSessionTimeout / 4, .seconds(30)))
        let group = ServiceGroup(
            configuration: .init(
                services: [
                    // Stopped in reverse order: the API first, the writer (and the cluster's database) last.
                ] + clusterServices + [
                    .init(service: writer), .init(service: background), .init(service: upkeep), .init(service: link),
                    // Returns at once when no names need looking up: that must not stop the Router.
                    .init(
                        service: TrustedProxyRefresh(proxies: configuration.trustedProxies, logger: logger),
                        successTerminationBehavior: .ignore),
                    .init(service: app),
                    // Ticks the voice connections; closes them (1000) when the Router stops.
                    .init(service: VoiceService(voice: voice)),
                ] + (lavalink.map { [.init(service: LavalinkService(node: $0))] } ?? []) + [
                ] + (relay.map { [.init(service: ClusterHandOver(member: $0.member, relay: $0))] } ?? []) + [
                    // Told of the shutdown first: its clock then runs while the rest stop.
                    .init(service: ShutdownDeadline(limit: .milliseconds(2_500), writer: writer, logger: logger)),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        try await group.run()
    }

    /// Whether the pair owns a session, for the engine link's reconciliation.
    static func ownership(_ member: ClusterMember) -> @Sendable (SessionID) -> Bool {
        { id in member.epoch(of: id) != nil }
    }

    /// The playground's files, shipped as a resource bundle beside the executable.
    static func publicDirectory() -> String? {
        Bundle.module.url(forResource: "Public", withExtension: nil)?.path
    }
}
