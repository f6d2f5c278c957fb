// Session snapshots in the cluster's PostgreSQL. A snapshot is written only while this pair owns
// its session at the epoch it was given (the statement names it), so a pair that lost a session
// can never overwrite what its new owner stores.
import Foundation
import ServiceSupport
import Synchronization
import WireProtocol

struct ClusterStorage: SessionStorage {
    let member: ClusterMember
    var database: ClusterDatabase { member.database }

    /// A playing session's position moves on by what it played after its last checkpoint: its
    /// owner went on renewing its lease (and playing) until it died or was cut off.
    func load(_ id: SessionID) async throws -> SessionSnapshot? {
        guard let (json, playedAfterMS) = try await database.snapshot(of: id), !json.isEmpty else { return nil }
        var snapshot = try JSONDecoder().decode(SessionSnapshot.self, from: Data(json.utf8))
        // A hand-over's position is where the new owner starts, at its moment: it does not move.
        if snapshot.startAtMS == nil { snapshot.advance(byPlaying: playedAfterMS) }
        return snapshot
    }

    /// Nothing at start: a pair's sessions come to it through their leases.
    func loadActive() async throws -> [SessionID: SessionSnapshot] { [:] }

    func save(_ batch: [SessionID: SessionSnapshot]) async throws {
        for (id, snapshot) in batch {
            // No longer this pair's: its new owner keeps it now.
            guard let epoch = member.epoch(of: id) else { continue }
            let json = String(decoding: try JSONCoding.encoder.encode(snapshot), as: UTF8.self)
            _ = try await database.store(id, json: json, active: snapshot.isActive, epoch: epoch)
        }
    }

    /// The last write at shutdown, given a second: the client's own event loops carry it.
    func saveBlocking(_ batch: [SessionID: SessionSnapshot]) throws {
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<(any Error)?>(nil)
        Task {
            do { try await save(batch) } catch { outcome.withLock { $0 = error } }
            done.signal()
        }
        if done.wait(timeout: .now() + 1) == .timedOut { throw TimeoutError(limit: .seconds(1)) }
        if let error = outcome.withLock({ $0 }) { throw error }
    }
}
