// A session command however it came — `POST /api/sessions/{id}/{command}` or a WebSocket message:
// refused while the engine link is down, counted against the browsers' share of the engine's
// plays when a browser sent it, then carried out by the session's controller.
import ServiceSupport
import WireProtocol

/// Runs the commands of both ways in.
struct SessionCommands: Sendable {
    let directory: SessionDirectory
    let link: EngineLink
    let engine: EngineClient

    /// Carries `command` out on session `id` and answers its state after it; `browser`: it came
    /// with a browser's token (held to the browsers' share of the pool).
    func run(_ command: SessionCommand, on id: SessionID, browser: Bool) async throws(APIError) -> SessionView {
        try link.requireConnected(engine)
        switch command {
        case .follow(let station): return try await directory.follow(id, station: station)
        case .unfollow: return try await directory.unfollow(id)
        default: break
        }
        if browser { try await directory.admitBrowser(command, on: id) }
        do {
            return try await directory.using(id) { try await $0.perform(command) }
        } catch let error as APIError {
            throw error
        } catch {
            throw .internalError
        }
    }
}
