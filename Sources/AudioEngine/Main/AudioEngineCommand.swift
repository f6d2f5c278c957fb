// The AudioEngine executable, kept thin: reads configuration and flags, then runs the engine's
// services (the `AudioEngine` module) until SIGTERM or SIGINT.
import ArgumentParser
import AudioEngine
import Foundation
import Logging

@main
struct AudioEngineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "AudioEngine",
        abstract: "Decodes sources, encodes Opus and paces frames for every session onto a Unix socket.",
        discussion: "Every option can also be set with the TONEARM_* environment variable named in its help.")

    @Option(help: "Unix socket the Router connects to (TONEARM_SOCKET, default /tmp/tonearm/engine.sock).")
    var socket: String?
    @Option(help: "Port of the HTTP control API on 127.0.0.1 (TONEARM_ENGINE_PORT, default 8180).")
    var port: Int?
    @Option(help: "Directory whose files may be played (TONEARM_MEDIA_DIR, default ./media).")
    var mediaDir: String?
    @Flag(help: "Allow http(s) sources on private and loopback addresses (TONEARM_ALLOW_PRIVATE_SOURCES).")
    var allowPrivateSources = false

    func run() async throws {
        var configuration = try EngineConfiguration(environment: ProcessInfo.processInfo.environment)
        if let socket { configuration.socketPath = socket }
        if let port { configuration.controlPort = port }
        if let mediaDir { configuration.mediaDirectory = mediaDir }
        if allowPrivateSources { configuration.allowPrivateSources = true }
        var logger = Logger(label: "tonearm.engine")
        logger.logLevel = .info
        try await AudioEngineService.run(configuration: configuration, logger: logger)
    }
}
