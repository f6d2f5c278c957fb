// The controller's outlets, given by the session directory (and by tests, which record them).
import ServiceSupport
import WireProtocol

/// Where a controller's changes go: clients hear the new state, the database keeps it; and where
/// the work it does not wait for runs.
struct SessionSink: Sendable {
    /// A JSON text message for every client of the session.
    var broadcast: @Sendable (SessionID, String) -> Void
    /// The snapshot to persist (coalesced and written off the audio path).
    var persist: @Sendable (SessionID, SessionSnapshot) -> Void
    /// Runs a job the controller does not wait for (a track resolving after its command was
    /// answered), cancelled when its owner fires; the Router's `BackgroundTasks` (a child task
    /// of that service), a plain task in unit tests.
    var spawn: @Sendable (CancellationSignal, @escaping @Sendable () async -> Void) -> Void = { owner, job in
        Task { try? await owner.run(job) }
    }
    /// A cluster's pair (nil alone): gives a session whose play this engine refused as full to a
    /// pair with room, as the snapshot given; answers whether it did.
    var seekRoom: (@Sendable (SessionID, SessionSnapshot) async -> Bool)?
}
