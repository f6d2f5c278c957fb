// The controller's two outlets, given by the session directory (and by tests, which record them).
import WireProtocol

/// Where a controller's changes go: clients hear the new state, the database keeps it.
struct SessionSink: Sendable {
    /// A JSON text message for every client of the session.
    var broadcast: @Sendable (SessionID, String) -> Void
    /// The snapshot to persist (coalesced and written off the audio path).
    var persist: @Sendable (SessionID, SessionSnapshot) -> Void
}
