// The Router executable, kept thin: reads configuration and flags, then runs the Router's services
// (the `Router` module) until SIGTERM or SIGINT; `Router migrate-database` copies a single pair's
// SQLite sessions into a cluster's PostgreSQL (docs/cluster.md).
import ArgumentParser
import Foundation
import Logging
import TonearmRouter

@main
struct RouterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "Router",
        abstract: "Routes the engine's audio to WebSocket clients and serves the public API and playground.",
        discussion: "Every option can also be set with the TONEARM_* environment variable named in its help.",
        subcommands: [Serve.self, MigrateDatabase.self], defaultSubcommand: Serve.self)
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Runs the Router (the default).")

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

struct MigrateDatabase: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate-database",
        abstract: "Copies every session of an SQLite database into a cluster's PostgreSQL (those already there stay as they are).")

    @Option(help: "The SQLite file (TONEARM_DATABASE, or tonearm.sqlite in TONEARM_DATA_DIR).")
    var from: String?
    @Option(help: "The PostgreSQL URL (TONEARM_DATABASE_URL).")
    var to: String?

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let source =
            from ?? environment["TONEARM_DATABASE"]
            ?? ((environment["TONEARM_DATA_DIR"] ?? "./data") as NSString).appendingPathComponent("tonearm.sqlite")
        guard let target = to ?? environment["TONEARM_DATABASE_URL"], !target.isEmpty else {
            throw ValidationError("give the PostgreSQL URL with --to or TONEARM_DATABASE_URL")
        }
        var logger = Logger(label: "tonearm.migrate")
        logger.logLevel = .warning
        let outcome = try await DatabaseCopy.copy(from: source, to: target, logger: logger)
        print(
            "copied \(outcome.copied) sessions from \(source); \(outcome.present) were in PostgreSQL already, "
                + "\(outcome.unreadable) could not be read")
    }
}
