// The Router executable, kept thin: reads configuration and flags, then runs the Router's services
// (the `Router` module) until SIGTERM or SIGINT.
import ArgumentParser
import Foundation
import Logging
import TonearmRouter

@main
struct RouterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "Router",
        abstract: "Routes the engine's audio to WebSocket clients and serves the public API and playground.",
        discussion: "Every option can also be set with the TONEARM_* environment variable named in its help.")

    @Option(help: "Address to listen on (TONEARM_ROUTER_HOST, default 127.0.0.1).")
    var host: String?
    @Option(help: "Port to listen on (TONEARM_ROUTER_PORT, default 8080).")
    var port: Int?
    @Option(help: "The engine's Unix socket (TONEARM_SOCKET, default /tmp/tonearm/engine.sock).")
    var socket: String?
    @Option(help: "The engine's control API (TONEARM_ENGINE_URL, default http://127.0.0.1:8180).")
    var engineURL: String?

    func run() async throws {
        var configuration = try RouterConfiguration(environment: ProcessInfo.processInfo.environment)
        if let host { configuration.host = host }
        if let port { configuration.port = port }
        if let socket { configuration.socketPath = socket }
        if let engineURL { configuration.engineURL = engineURL }
        var logger = Logger(label: "tonearm.router")
        logger.logLevel = .info
        try await RouterService.run(configuration: configuration, logger: logger)
    }
}
