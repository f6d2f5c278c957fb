// The Router's promise to an orchestrator that sends SIGTERM and then waits (Compose: 10 s, then
// SIGKILL): it exits within `limit` whatever its clients do. The services stop in order and
// normally well inside it (each WebSocket is told 1001 and cut a second later); if something
// still holds on when the limit is reached (a connection the HTTP server waits for), what is
// waiting to be stored is written, and the process exits.
import Foundation
import Logging
import ServiceLifecycle

/// Starts the clock when the graceful shutdown starts (the last service of the group is told
/// first); the clock runs on a thread of its own, so nothing the services wait for can hold it.
struct ShutdownDeadline: Service {
    let limit: Duration
    let writer: PersistenceWriter
    let logger: Logger

    func run() async {
        // Until the shutdown starts (or the group is cancelled: an exit is due then too).
        try? await gracefulShutdown()
        let (limit, writer, logger) = (limit, writer, logger)
        let thread = Thread {
            Thread.sleep(forTimeInterval: Double(limit.components.seconds) + Double(limit.components.attoseconds) / 1e18)
            logger.warning("still stopping after the shutdown limit; storing what waits and exiting", metadata: ["limit": "\(limit)"])
            writer.flushNow()
            exit(0)
        }
        thread.name = "tonearm-shutdown-deadline"
        thread.start()
    }
}
