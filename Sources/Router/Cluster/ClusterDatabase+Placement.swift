// A client's placement in one transaction that every pair's placements queue for: the session's
// ownership and the live pairs are read, the choice made and the session assigned while no other
// placement runs. Sessions placed at once from several pairs then spread as if placed one by one
// (read separately, each saw the same counts, and six guilds placed at once from three pairs went
// 4/2/0 and 5/1/0).
//
// The queue is an advisory lock held to the transaction's end. A pair cut off while it holds the
// lock must not hold everyone's placements: the transaction's own settings end it on the server
// after a second idle in it, and a placement waiting for the lock gives up after 800 ms (the
// caller answers 503 with Retry-After; the statement deadline is 1 s). Delivered late, after its
// sender gave up, the transaction's assignment is the plain one's (it names the epoch it expects).
import Foundation
import Logging
import PostgresNIO
import WireProtocol

extension ClusterDatabase {
    /// The advisory lock's key: every pair's placements take the same one.
    static let placementLock: Int64 = 0x746f_6e65_6172_6d01

    /// Runs `decide` on the session's ownership and the live pairs, under the placement lock, and
    /// assigns the session to the pair it names (nil: none) with a lease of `lease`. Answers the
    /// decision and the new epoch (nil: nothing assigned, or another path changed the session
    /// first).
    func placing<Decision: Sendable>(
        _ id: SessionID, pairsWithin: Duration, steadyFor: Duration, lease: Duration,
        decide: @escaping @Sendable (Ownership?, [Pair]) -> (decision: Decision, assignTo: String?)
    ) async throws -> (decision: Decision, epoch: Int64?) {
        return try await run { connection, logger in
            try await connection.withTransaction(logger: logger) { connection in
                try await connection.query(
                    """
                    SELECT set_config('idle_in_transaction_session_timeout', '1000', true),
                        set_config('lock_timeout', '800', true)
                    """, logger: logger)
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.placementLock))", logger: logger)
                let ownership = try await Self.ownership(of: id, on: connection, logger: logger)
                let pairs = try await Self.livePairs(
                    within: pairsWithin, steadyFor: steadyFor, on: connection, logger: logger)
                let (decision, target) = decide(ownership, pairs)
                guard let target else { return (decision, nil) }
                let epoch = try await Self.assign(
                    id, to: target, expected: ownership, lease: lease, snapshot: "", on: connection, logger: logger)
                return (decision, epoch)
            }
        }
    }
}
