// Every setting of the engine, with its default, read from TONEARM_* environment variables in
// `main` only (flags override them); tests construct it directly.
import Foundation

/// The engine's settings.
struct EngineConfiguration: Sendable {
    /// The Unix socket the Router connects to.
    var socketPath = "/tmp/tonearm/engine.sock"
    /// Host of the HTTP control API; loopback so only the Router (same host or pod) reaches it.
    var controlHost = "127.0.0.1"
    var controlPort = 8180
    /// Plays name files inside this directory.
    var mediaDirectory = "./media"
    var playback = PlaybackConfiguration()
    /// Threads that decode and encode ahead of the pacer; defaults to the number of cores.
    var workerThreads = ProcessInfo.processInfo.activeProcessorCount

    init() {}

    /// Defaults overridden by whatever `environment` sets.
    init(environment: [String: String]) throws {
        if let value = environment["TONEARM_SOCKET"] { socketPath = value }
        if let value = environment["TONEARM_ENGINE_HOST"] { controlHost = value }
        if let value = environment["TONEARM_ENGINE_PORT"] { controlPort = try Self.int(value, "TONEARM_ENGINE_PORT", 0...65535) }
        if let value = environment["TONEARM_MEDIA_DIR"] { mediaDirectory = value }
        if let value = environment["TONEARM_BITRATE"] {
            playback.encoder.bitrate = Int32(try Self.int(value, "TONEARM_BITRATE", 6_000...510_000))
        }
        if let value = environment["TONEARM_COMPLEXITY"] {
            playback.encoder.complexity = Int32(try Self.int(value, "TONEARM_COMPLEXITY", 0...10))
        }
        if let value = environment["TONEARM_WORKER_THREADS"] {
            workerThreads = try Self.int(value, "TONEARM_WORKER_THREADS", 1...256)
        }
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
