// Every setting of the Router, with its default, read from TONEARM_* environment variables in
// `main` only (flags override them); tests construct it directly.
import Foundation
import NIOCore
import PostgresNIO
import ServiceSupport

/// The Router's settings.
package struct RouterConfiguration: Sendable {
    package var host = "127.0.0.1"
    package var port = 8080
    /// The engine's Unix socket (the same TONEARM_SOCKET the engine reads).
    package var socketPath = "/tmp/tonearm/engine.sock"
    /// Where the engine's HTTP control API answers.
    package var engineURL = "http://127.0.0.1:8180"
    /// Frames a client may lag before its oldest are dropped (50 = 1 s).
    var clientBufferFrames = 50
    /// Where the Router keeps its files: the generated token secret and the SQLite database.
    var dataDirectory = "./data"
    /// The SQLite file with queues and settings (`<dataDirectory>/tonearm.sqlite` when not set).
    var databasePath: String?
    /// WebSocket pings; a client that has not answered one by the next is closed.
    var pingInterval: Duration = .seconds(30)
    /// A connection's first request head must be complete within this long of it opening.
    var headerTimeout: TimeAmount = .seconds(10)
    /// A keep-alive connection's next request head must be complete within this long of the
    /// previous answer.
    var idleTimeout: TimeAmount = .seconds(60)
    /// A session with no clients and nothing playing is released from memory after this long
    /// (its queue stays in the database).
    var staleSessionTimeout: Duration = .seconds(300)
    /// Signs browser identity tokens; generated and kept in `dataDirectory` when not set.
    var tokenSecret: String?
    /// Lets bots use any (guild) session.
    var botToken: String?
    /// The most engine plays browser sessions may hold at once; bots keep the rest of the pool.
    /// Half of TONEARM_MAX_SESSIONS (the engine's pool, 60 by default) unless set.
    var browserPlays = 30
    /// Identities one client address may mint: `identityBurst` at once, then this many a minute
    /// (0: no limit).
    var identityPerMinute = 10
    var identityBurst = 20
    /// Proxies whose X-Forwarded-For names the client (Caddy in front, a load balancer).
    var trustedProxies = TrustedProxies()
    /// HTTPS: a PEM certificate chain (leaf first) and its PEM private key. Both or neither.
    package var tlsCertificatePath: String?
    package var tlsKeyPath: String?
    /// A PEM file of the certificate authorities Discord voice servers are checked against (the
    /// system's when nil): tests name their stand-in voice server's.
    var voiceTrustRoots: String?
    /// tonearm-dave's Unix socket (TONEARM_DAVE_SOCKET): DAVE for the Router's own voice
    /// connections. Without it they offer no DAVE, and Discord refuses them (4017).
    var daveSocket: String?
    /// Lavalink v4's API under `/v4` (docs/lavalink.md), served when a password is set.
    var lavalinkPassword: String?
    /// How often Lavalink clients get each player's `playerUpdate` (Lavalink's default, 5 s).
    var lavalinkPlayerUpdateInterval: Duration = .seconds(5)
    /// How often Lavalink clients get the node's `stats` op, whose `frameStats` count the time
    /// since the one before (Lavalink's fixed minute).
    var lavalinkStatsInterval: Duration = .seconds(60)
    /// Whether a new session's tracks are brought to the engine's target loudness.
    var normalizeByDefault = true
    /// A cluster's shared PostgreSQL and this pair's place in it (nil: one pair on SQLite).
    var cluster: ClusterSettings?

    init() {}

    package init(environment: [String: String]) throws {
        if let value = environment["TONEARM_ROUTER_HOST"] { host = value }
        if let value = environment["TONEARM_ROUTER_PORT"] {
            guard let port = Int(value), (0...65535).contains(port) else {
                throw RouterConfigurationError(message: "TONEARM_ROUTER_PORT=\(value) is not a port number (0...65535)")
            }
            self.port = port
        }
        if let value = environment["TONEARM_SOCKET"] { socketPath = value }
        if let value = environment["TONEARM_DATA_DIR"] { dataDirectory = value }
        if let value = environment["TONEARM_CLIENT_BUFFER_FRAMES"] {
            guard let frames = Int(value), (5...3000).contains(frames) else {
                throw RouterConfigurationError(message: "TONEARM_CLIENT_BUFFER_FRAMES=\(value) is not a number of frames (5...3000)")
            }
            clientBufferFrames = frames
        }
        if let value = environment["TONEARM_MAX_SESSIONS"], let pool = Int(value), pool > 0 { browserPlays = pool / 2 }
        if let value = environment["TONEARM_BROWSER_PLAYS"], !value.isEmpty {
            guard let plays = Int(value), (0...100_000).contains(plays) else {
                throw RouterConfigurationError(message: "TONEARM_BROWSER_PLAYS=\(value) is not a number of plays (0...100000)")
            }
            browserPlays = plays
        }
        if let value = environment["TONEARM_IDENTITY_RATE"] {
            identityPerMinute = try Self.count(value, "TONEARM_IDENTITY_RATE", 0...100_000, "identities a minute")
        }
        if let value = environment["TONEARM_IDENTITY_BURST"] {
            identityBurst = try Self.count(value, "TONEARM_IDENTITY_BURST", 1...100_000, "identities")
        }
        if let value = environment["TONEARM_TRUSTED_PROXIES"] {
            trustedProxies = try TrustedProxies.parse(value)
        }
        if let value = environment["TONEARM_DATABASE"], !value.isEmpty { databasePath = value }
        if let value = environment["TONEARM_PING_INTERVAL"] { pingInterval = .seconds(try Self.seconds(value, "TONEARM_PING_INTERVAL")) }
        if let value = environment["TONEARM_HTTP_HEADER_TIMEOUT"] {
            headerTimeout = .nanoseconds(Int64(try Self.seconds(value, "TONEARM_HTTP_HEADER_TIMEOUT") * 1e9))
        }
        if let value = environment["TONEARM_HTTP_IDLE_TIMEOUT"] {
            idleTimeout = .nanoseconds(Int64(try Self.seconds(value, "TONEARM_HTTP_IDLE_TIMEOUT") * 1e9))
        }
        if let value = environment["TONEARM_STALE_SESSION_TIMEOUT"] {
            staleSessionTimeout = .seconds(try Self.seconds(value, "TONEARM_STALE_SESSION_TIMEOUT"))
        }
        if let value = environment["TONEARM_TOKEN_SECRET"], !value.isEmpty { tokenSecret = value }
        if let value = environment["TONEARM_BOT_TOKEN"], !value.isEmpty { botToken = value }
        if let value = environment["TONEARM_NORMALIZE"] {
            guard let normalize = SettingText.bool(value) else {
                throw RouterConfigurationError(message: SettingText.notABool("TONEARM_NORMALIZE", value))
            }
            normalizeByDefault = normalize
        }
        if let value = environment["TONEARM_TLS_CERT"], !value.isEmpty { tlsCertificatePath = value }
        if let value = environment["TONEARM_VOICE_CA_FILE"], !value.isEmpty {
            guard FileManager.default.isReadableFile(atPath: value) else {
                throw RouterConfigurationError(message: "TONEARM_VOICE_CA_FILE=\(value) is not a readable file")
            }
            voiceTrustRoots = value
        }
        if let value = environment["TONEARM_DAVE_SOCKET"], !value.isEmpty { daveSocket = value }
        if let value = environment["TONEARM_TLS_KEY"], !value.isEmpty { tlsKeyPath = value }
        if (tlsCertificatePath == nil) != (tlsKeyPath == nil) {
            throw RouterConfigurationError(
                message: "TONEARM_TLS_CERT and TONEARM_TLS_KEY go together: set both (PEM files) to serve HTTPS, or neither")
        }
        if let url = environment["TONEARM_DATABASE_URL"], !url.isEmpty {
            cluster = try Self.cluster(url: url, environment: environment, port: port)
        }
        if let value = environment["TONEARM_LAVALINK_PASSWORD"], !value.isEmpty {
            lavalinkPassword = value
        }
        if let value = environment["TONEARM_LAVALINK_PLAYER_UPDATE_INTERVAL"] {
            let seconds = try Self.seconds(value, "TONEARM_LAVALINK_PLAYER_UPDATE_INTERVAL")
            guard seconds >= 0.1 else {
                throw RouterConfigurationError(message: "TONEARM_LAVALINK_PLAYER_UPDATE_INTERVAL must be at least 0.1 s")
            }
            lavalinkPlayerUpdateInterval = .seconds(seconds)
        }
        if let value = environment["TONEARM_LAVALINK_STATS_INTERVAL"] {
            let seconds = try Self.seconds(value, "TONEARM_LAVALINK_STATS_INTERVAL")
            guard seconds >= 1 else { throw RouterConfigurationError(message: "TONEARM_LAVALINK_STATS_INTERVAL must be at least 1 s") }
            lavalinkStatsInterval = .seconds(seconds)
        }
        if let value = environment["TONEARM_ENGINE_URL"] {
            engineURL = value
        } else if let port = environment["TONEARM_ENGINE_PORT"] {
            // Deployed together on one host: follow the engine's port unless told otherwise.
            engineURL = "http://127.0.0.1:\(port)"
        }
    }
}

extension RouterConfiguration {
    var database: String { databasePath ?? (dataDirectory as NSString).appendingPathComponent("tonearm.sqlite") }

    /// The cluster settings: TONEARM_PAIR_ID (the host name unless set), TONEARM_PAIR_ADDRESS
    /// (http://<host name>:<port> unless set), TONEARM_MAX_SESSIONS, TONEARM_CLUSTER_LEASE.
    private static func cluster(url: String, environment: [String: String], port: Int) throws -> ClusterSettings {
        _ = try PostgresClient.Configuration.parse(urls: url)
        let host = ProcessInfo.processInfo.hostName
        let pairID = environment["TONEARM_PAIR_ID"].flatMap { $0.isEmpty ? nil : $0 } ?? host
        guard pairID.utf8.count <= 64, pairID.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else {
            throw RouterConfigurationError(message: "TONEARM_PAIR_ID=\(pairID) is not a name (1 to 64 ASCII characters, no spaces)")
        }
        let address = environment["TONEARM_PAIR_ADDRESS"].flatMap { $0.isEmpty ? nil : $0 } ?? "http://\(host):\(port)"
        guard let parsed = URLComponents(string: address), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil,
            parsed.path.isEmpty || parsed.path == "/"
        else {
            throw RouterConfigurationError(message: "TONEARM_PAIR_ADDRESS=\(address) is not an http(s)://host:port address")
        }
        var settings = ClusterSettings(databaseURL: url, pairID: pairID, address: address.hasSuffix("/") ? String(address.dropLast()) : address)
        if let value = environment["TONEARM_MAX_SESSIONS"], !value.isEmpty {
            settings.maxSessions = try count(value, "TONEARM_MAX_SESSIONS", 1...100_000, "sessions")
        }
        if let value = environment["TONEARM_CLUSTER_LEASE"] {
            let seconds = try Self.seconds(value, "TONEARM_CLUSTER_LEASE")
            guard (0.5...60).contains(seconds) else {
                throw RouterConfigurationError(message: "TONEARM_CLUSTER_LEASE=\(value) is not a lease in seconds (0.5 to 60)")
            }
            settings.lease = .milliseconds(Int64(seconds * 1000))
        }
        return settings
    }

    private static func count(_ value: String, _ name: String, _ range: ClosedRange<Int>, _ what: String) throws -> Int {
        guard let number = Int(value), range.contains(number) else {
            throw RouterConfigurationError(message: "\(name)=\(value) is not a number of \(what) (\(range.lowerBound)...\(range.upperBound))")
        }
        return number
    }

    private static func seconds(_ value: String, _ name: String) throws -> Double {
        guard let seconds = Double(value), seconds > 0, seconds < 86_400 else {
            throw RouterConfigurationError(message: "\(name)=\(value) is not a number of seconds (more than 0, less than a day)")
        }
        return seconds
    }
}

struct RouterConfigurationError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
