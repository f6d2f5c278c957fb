// Every setting of the engine, with its default, read from TONEARM_* environment variables in
// `main` only (flags override them); tests construct it directly.
import Foundation
import ServiceSupport

/// The engine's settings.
package struct EngineConfiguration: Sendable {
    /// The Unix socket the Router connects to.
    package var socketPath = "/tmp/tonearm/engine.sock"
    /// Host of the HTTP control API; loopback so only the Router (same host or pod) reaches it.
    var controlHost = "127.0.0.1"
    package var controlPort = 8180
    /// Plays name files inside this directory.
    package var mediaDirectory = "./media"
    var playback = PlaybackConfiguration()
    /// Threads that decode and encode ahead of the pacer; defaults to the number of cores.
    var workerThreads = ProcessInfo.processInfo.activeProcessorCount
    /// Threads that open sources (network connections block); separate so they never hold up encoding.
    var openerThreads = 4
    /// The pacer thread's `SCHED_FIFO` priority where the system allows it (`CAP_SYS_NICE`);
    /// nil keeps it at normal scheduling.
    var pacerRealtimePriority: Int32? = 10
    /// Allow http(s) sources on loopback, private and link-local addresses (tests, local development).
    package var allowPrivateSources = false
    /// Networks allowed as sources besides the public ones (a NAS on the LAN).
    var allowedSourceNetworks: [IPNetwork] = []
    /// A PEM file of authorities trusted for https sources besides the system's.
    var sourceAuthorities: String?
    /// The yt-dlp executable (a name on PATH or a path).
    var ytdlpPath = "yt-dlp"
    /// yt-dlp processes at once, and how many more may wait (sources opened to describe them
    /// have a gate of their own, four times as wide).
    var resolveLimits = ConcurrencyGate.Limits()
    /// Every yt-dlp run, and every source's opening (for a play or to describe it), ends within
    /// this long, with `source_timeout` if it has not.
    var resolveTimeout: Duration = .seconds(15)
    /// The yt-dlp search prefix for `GET /search` (`ytsearch`, `scsearch`, …).
    var searchPrefix = "ytsearch"
    /// Told to stop, the engine goes on playing for up to this long while its Router hands the
    /// sessions to other pairs of a cluster, and stops as soon as none is heard (0: at once).
    var handOverGrace: Duration = .zero
    /// The share of its cores the engine may use for its sessions, in per cent: a play that
    /// would take it past is refused (`503 engine_full`), and transcoding sessions step down in
    /// complexity as it is approached. 0 turns both off.
    package var cpuBudgetPercent: Double = 75
    /// The lowest complexity transcoding sessions step down to under load (at least 0, at most
    /// the configured `TONEARM_COMPLEXITY`, which is where they start and come back to).
    var minimumComplexity: Int32 = 5

    init() {}

    /// The policy sources are fetched under.
    var sourcePolicy: NetworkPolicy {
        NetworkPolicy(allowPrivateSources: allowPrivateSources, allowedNetworks: allowedSourceNetworks)
    }

    /// Defaults overridden by whatever `environment` sets.
    package init(environment: [String: String]) throws {
        if let value = environment["TONEARM_SOCKET"] { socketPath = value }
        if let value = environment["TONEARM_ENGINE_HOST"] { controlHost = value }
        if let value = environment["TONEARM_ENGINE_PORT"] { controlPort = try Self.int(value, "TONEARM_ENGINE_PORT", 0...65535) }
        if let value = environment["TONEARM_MEDIA_DIR"] { mediaDirectory = value }
        if let value = environment["TONEARM_BITRATE"] {
            playback.encoder.bitrate = Int32(try Self.int(value, "TONEARM_BITRATE", 6_000...510_000))
        }
        if let value = environment["TONEARM_CPU_BUDGET"] {
            cpuBudgetPercent = try Self.number(value, "TONEARM_CPU_BUDGET", 0...100)
        }
        if let value = environment["TONEARM_MIN_COMPLEXITY"] {
            minimumComplexity = Int32(try Self.int(value, "TONEARM_MIN_COMPLEXITY", 0...10))
        }
        if let value = environment["TONEARM_COMPLEXITY"] {
            playback.encoder.complexity = Int32(try Self.int(value, "TONEARM_COMPLEXITY", 0...10))
        }
        if let value = environment["TONEARM_MAX_SESSIONS"] {
            playback.maxSessions = try Self.int(value, "TONEARM_MAX_SESSIONS", 1...100_000)
        }
        if let value = environment["TONEARM_STUCK_THRESHOLD_MS"] {
            playback.stuckTicks = UInt64(try Self.int(value, "TONEARM_STUCK_THRESHOLD_MS", 100...600_000) / 20)
        }
        if let value = environment["TONEARM_IDLE_TIMEOUT"] {
            playback.idleTimeout = .seconds(try Self.int(value, "TONEARM_IDLE_TIMEOUT", 1...86_400))
        }
        if let value = environment["TONEARM_ENCODE_LEAD_FRAMES"] {
            playback.leadFrames = try Self.int(value, "TONEARM_ENCODE_LEAD_FRAMES", 1...50)
        }
        if let value = environment["TONEARM_PASSTHROUGH_LEAD_FRAMES"] {
            playback.passthroughLeadFrames = try Self.int(value, "TONEARM_PASSTHROUGH_LEAD_FRAMES", 1...50)
        }
        if let value = environment["TONEARM_REFILL_FRAMES"] {
            playback.refillFrames = try Self.int(value, "TONEARM_REFILL_FRAMES", 1...49)
        }
        if let value = environment["TONEARM_NORMALIZE"] {
            playback.normalizeByDefault = try Self.bool(value, "TONEARM_NORMALIZE")
        }
        if let value = environment["TONEARM_LOUDNESS_TARGET"] {
            let range = LoudnessNormalizer.targetRange
            guard let target = Double(value), range.contains(target) else {
                throw ConfigurationError(
                    message: "TONEARM_LOUDNESS_TARGET=\(value) is not a loudness in LUFS from \(Int(range.lowerBound)) to \(Int(range.upperBound))")
            }
            playback.loudnessTarget = target
        }
        if let value = environment["TONEARM_ALLOW_PRIVATE_SOURCES"] {
            allowPrivateSources = try Self.bool(value, "TONEARM_ALLOW_PRIVATE_SOURCES")
        }
        if let value = environment["TONEARM_ALLOWED_SOURCE_NETWORKS"] {
            do {
                allowedSourceNetworks = try IPNetwork.list(value, setting: "TONEARM_ALLOWED_SOURCE_NETWORKS")
            } catch {
                throw ConfigurationError(message: error.message)
            }
        }
        if let value = environment["TONEARM_SOURCE_CA_FILE"], !value.isEmpty { sourceAuthorities = value }
        if let value = environment["TONEARM_YTDLP"] { ytdlpPath = value }
        if let value = environment["TONEARM_SEARCH_PREFIX"] { searchPrefix = value }
        if let value = environment["TONEARM_HANDOVER_GRACE"] {
            handOverGrace = .seconds(try Self.int(value, "TONEARM_HANDOVER_GRACE", 0...60))
        }
        if let value = environment["TONEARM_RESOLVE_CONCURRENCY"] {
            resolveLimits.limit = try Self.int(value, "TONEARM_RESOLVE_CONCURRENCY", 1...64)
        }
        if let value = environment["TONEARM_RESOLVE_QUEUE"] {
            resolveLimits.queueLimit = try Self.int(value, "TONEARM_RESOLVE_QUEUE", 0...1_000)
        }
        if let value = environment["TONEARM_RESOLVE_TIMEOUT"] {
            resolveTimeout = .seconds(try Self.int(value, "TONEARM_RESOLVE_TIMEOUT", 1...300))
        }
        if let value = environment["TONEARM_WORKER_NICE"] {
            playback.workerNice = Int32(try Self.int(value, "TONEARM_WORKER_NICE", 0...19))
        }
        if let value = environment["TONEARM_PACER_PRIORITY"] {
            let priority = try Self.int(value, "TONEARM_PACER_PRIORITY", 0...99)
            pacerRealtimePriority = priority == 0 ? nil : Int32(priority)
        }
        if let value = environment["TONEARM_WORKER_THREADS"] {
            workerThreads = try Self.int(value, "TONEARM_WORKER_THREADS", 1...256)
        }
        if playback.leadFrames > 1 && playback.refillFrames >= playback.leadFrames {
            throw ConfigurationError(
                message: "TONEARM_REFILL_FRAMES=\(playback.refillFrames) must be below TONEARM_ENCODE_LEAD_FRAMES="
                    + "\(playback.leadFrames): a session must keep a frame in hand while its worker refills")
        }
    }

    static func bool(_ text: String, _ name: String) throws -> Bool {
        guard let value = SettingText.bool(text) else { throw ConfigurationError(message: SettingText.notABool(name, text)) }
        return value
    }

    static func number(_ text: String, _ name: String, _ range: ClosedRange<Double>) throws -> Double {
        guard let value = Double(text), value.isFinite, range.contains(value) else {
            throw ConfigurationError(message: "\(name)=\(text) is not a number in \(Int(range.lowerBound))...\(Int(range.upperBound))")
        }
        return value
    }

    static func int(_ text: String, _ name: String, _ range: ClosedRange<Int>) throws -> Int {
        guard let value = Int(text), range.contains(value) else {
            throw ConfigurationError(message: "\(name)=\(text) is not a whole number in \(range.lowerBound)...\(range.upperBound)")
        }
        return value
    }
}

struct ConfigurationError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
