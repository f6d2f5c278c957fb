// Where session snapshots are kept: the embedded SQLite file (`SessionDatabase`, the default), or
// PostgreSQL shared by a cluster's pairs (`ClusterStorage`, with TONEARM_DATABASE_URL).
import WireProtocol

protocol SessionStorage: Sendable {
    /// The stored snapshot of one session.
    func load(_ id: SessionID) async throws -> SessionSnapshot?
    /// The sessions to bring back when the Router starts (a cluster's come through their leases).
    func loadActive() async throws -> [SessionID: SessionSnapshot]
    /// Writes a batch of snapshots.
    func save(_ batch: [SessionID: SessionSnapshot]) async throws
    /// Writes a batch on the calling thread: the last write when the Router stops.
    func saveBlocking(_ batch: [SessionID: SessionSnapshot]) throws
}

extension SessionDatabase: SessionStorage {}
