// What the pairs of a cluster share, in PostgreSQL (TONEARM_DATABASE_URL): each session's stored
// snapshot with its owner, the owner's fencing epoch and its lease, and each pair's heartbeat and
// load. docs/cluster.md describes the tables and why each statement is shaped as it is.
//
// Every statement that changes a session names the epoch it expects, so a pair that lost a
// session (its lease passed to another pair) can no longer write it: its writes match no row.
// Every statement has a deadline (`DatabaseHosts.run(within:)`); one that reaches the server
// late, after its sender gave up on it, must do no harm, and none does: see each.
import Foundation
import Logging
import PostgresNIO
import WireProtocol

/// One pair's view of the shared database.
struct ClusterDatabase: Sendable {
    /// Its server, or its servers of which one takes writes.
    let hosts: DatabaseHosts
    let pairID: String
    let logger: Logger
    /// The longest a statement outside the rounds may take before its connection is closed.
    var statementLimit: Duration = .seconds(1)

    /// A pair as the others see it.
    struct Pair: Sendable, Equatable {
        var id: String
        var address: String
        var sessions: Int
        var maxSessions: Int
        var load: Double
        var lateFrames: Int
        var draining: Bool
        /// Whether its engine takes new plays (its load report says `admitting`).
        var admitting = true
        /// Whether its heartbeats have come steadily for a lease: a pair just back from a cut (or
        /// just started) is given nothing while another pair can take it.
        var steady = true
    }

    /// A session row's ownership.
    struct Ownership: Sendable, Equatable {
        var owner: String?
        var epoch: Int64
        /// Whether the lease is still running by the database's clock.
        var live: Bool
    }

    /// What a pair's heartbeat says of it.
    struct Heartbeat: Sendable {
        var address: String
        var sessions: Int
        var maxSessions: Int
        var load: Double
        var lateFrames: Int
        var draining: Bool
        var admitting = true
    }

    func run<T: Sendable>(
        within limit: Duration? = nil, _ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> T
    ) async throws -> T {
        let logger = logger
        return try await hosts.run(within: limit ?? statementLimit) { try await body($0, logger) }
    }

    // MARK: Pairs

    /// One round in one statement: this pair's heartbeat, and the lease of every session it owns
    /// renewed; answers those sessions with their epochs. The heartbeat's `steady_since` is when
    /// its present run of heartbeats began, each within `gap` of the one before (the database's
    /// clock judges, so a statement held up in a cut and delivered late starts a run, it does not
    /// extend one). A renewal sets `renewed_at` only on rows whose snapshot this pair stored
    /// (`stored_epoch`): a row taken over keeps its last owner's, which says how far that owner
    /// played after its last checkpoint (`snapshot(of:)`). Delivered late, this renews what the
    /// pair still owns (no other pair could take it meanwhile) and marks a heartbeat a new run.
    func round(_ beat: Heartbeat, lease: Duration, gap: Duration, within limit: Duration) async throws -> [SessionID: Int64] {
        let (pair, seconds, gapSeconds) = (pairID, Self.seconds(lease), Self.seconds(gap))
        return try await run(within: limit) { connection, logger in
            let rows = try await connection.query(
                """
                WITH beat AS (
                    INSERT INTO tonearm_pair (id, address, seen_at, steady_since, sessions, max_sessions, load, late_frames, draining, admitting)
                    VALUES (\(pair), \(beat.address), clock_timestamp(), clock_timestamp(), \(beat.sessions), \(beat.maxSessions),
                        \(beat.load), \(beat.lateFrames), \(beat.draining), \(beat.admitting))
                    ON CONFLICT (id) DO UPDATE SET address = excluded.address, seen_at = excluded.seen_at,
                        steady_since = CASE WHEN tonearm_pair.seen_at > excluded.seen_at - make_interval(secs => \(gapSeconds))
                            THEN coalesce(tonearm_pair.steady_since, excluded.seen_at) ELSE excluded.seen_at END,
                        sessions = excluded.sessions, max_sessions = excluded.max_sessions, load = excluded.load,
                        late_frames = excluded.late_frames, draining = excluded.draining, admitting = excluded.admitting
                    RETURNING 1)
                UPDATE tonearm_session SET lease_until = clock_timestamp() + make_interval(secs => \(seconds)),
                    renewed_at = CASE WHEN stored_epoch = epoch THEN clock_timestamp() ELSE renewed_at END
                WHERE owner = \(pair)
                RETURNING id, epoch
                """, logger: logger)
            var owned: [SessionID: Int64] = [:]
            for try await (raw, epoch) in rows.decode((String, Int64).self) {
                if let id = try? SessionID(raw) { owned[id] = epoch }
            }
            return owned
        }
    }

    /// Writes the heartbeat alone (a draining pair's, saying so at once).
    func heartbeat(_ beat: Heartbeat) async throws {
        let pair = pairID
        try await run { connection, logger in
            try await connection.query(
                """
                UPDATE tonearm_pair SET address = \(beat.address), seen_at = clock_timestamp(), sessions = \(beat.sessions),
                    max_sessions = \(beat.maxSessions), load = \(beat.load), late_frames = \(beat.lateFrames),
                    draining = \(beat.draining), admitting = \(beat.admitting)
                WHERE id = \(pair)
                """, logger: logger)
        }
    }

    /// The pairs heard from within `within` (by the database's clock), each with the sessions it
    /// holds a lease on now (counted from the sessions, so a placement just made counts at once),
    /// and whether its heartbeats have come steadily for `steadyFor`.
    func livePairs(within: Duration, steadyFor: Duration) async throws -> [Pair] {
        try await run { connection, logger in
            try await Self.livePairs(within: within, steadyFor: steadyFor, on: connection, logger: logger)
        }
    }

    static func livePairs(
        within: Duration, steadyFor: Duration, on connection: PostgresConnection, logger: Logger
    ) async throws -> [Pair] {
        let (seconds, steadySeconds) = (Self.seconds(within), Self.seconds(steadyFor))
        let rows = try await connection.query(
            """
            SELECT p.id, p.address,
                (SELECT count(*)::integer FROM tonearm_session s WHERE s.owner = p.id AND s.lease_until > clock_timestamp()),
                p.max_sessions, p.load, p.late_frames, p.draining, p.admitting,
                coalesce(p.steady_since <= clock_timestamp() - make_interval(secs => \(steadySeconds)), false)
            FROM tonearm_pair p
            WHERE p.seen_at > clock_timestamp() - make_interval(secs => \(seconds))
            """, logger: logger)
        var pairs: [Pair] = []
        for try await (id, address, sessions, maxSessions, load, late, draining, admitting, steady) in rows.decode(
            (String, String, Int, Int, Double, Int, Bool, Bool, Bool).self)
        {
            pairs.append(
                Pair(
                    id: id, address: address, sessions: sessions, maxSessions: maxSessions, load: load, lateFrames: late,
                    draining: draining, admitting: admitting, steady: steady))
        }
        return pairs
    }

    /// Forgets this pair (a clean stop): the others need not wait for its heartbeat to age.
    /// Late, it forgets a pair that may be back: its next heartbeat makes it again, as new.
    func leave() async throws {
        let pair = pairID
        try await run { connection, logger in
            try await connection.query("DELETE FROM tonearm_pair WHERE id = \(pair)", logger: logger)
        }
    }

    // MARK: Sessions

    /// The session's ownership, nil when it was never stored.
    func ownership(of id: SessionID) async throws -> Ownership? {
        try await run { connection, logger in try await Self.ownership(of: id, on: connection, logger: logger) }
    }

    static func ownership(of id: SessionID, on connection: PostgresConnection, logger: Logger) async throws -> Ownership? {
        let rows = try await connection.query(
            "SELECT owner, epoch, lease_until > clock_timestamp() FROM tonearm_session WHERE id = \(id.description)",
            logger: logger)
        for try await (owner, epoch, live) in rows.decode((String?, Int64, Bool).self) {
            return Ownership(owner: owner, epoch: epoch, live: live)
        }
        return nil
    }

    /// Gives the session to `pair` with a new epoch and a lease of `lease`, if its ownership is
    /// still `expected` and its lease still over (or it has no owner). Answers the new epoch, or
    /// nil when another pair changed it first. A session never stored gets its row. Late, it
    /// matches nothing: the epoch it expects has moved on, or it gives a lease nobody else held.
    /// A lease its owner renewed after `expected` was read is live, even when the owner is the
    /// pair assigning: its own round may have taken the session back meanwhile (it did, and the
    /// session was then played by two pairs until the next round).
    func assign(_ id: SessionID, to pair: String, expected: Ownership?, lease: Duration, snapshot: String) async throws -> Int64? {
        try await run { connection, logger in
            try await Self.assign(id, to: pair, expected: expected, lease: lease, snapshot: snapshot, on: connection, logger: logger)
        }
    }

    static func assign(
        _ id: SessionID, to pair: String, expected: Ownership?, lease: Duration, snapshot: String,
        on connection: PostgresConnection, logger: Logger
    ) async throws -> Int64? {
        let seconds = Self.seconds(lease)
        let rows: PostgresRowSequence
        if let expected {
            rows = try await connection.query(
                """
                UPDATE tonearm_session SET owner = \(pair), epoch = epoch + 1,
                    lease_until = clock_timestamp() + make_interval(secs => \(seconds))
                WHERE id = \(id.description) AND epoch = \(expected.epoch)
                    AND (lease_until <= clock_timestamp() OR owner IS NULL)
                RETURNING epoch
                """, logger: logger)
        } else {
            rows = try await connection.query(
                """
                INSERT INTO tonearm_session (id, snapshot, owner, epoch, lease_until, stored_epoch)
                VALUES (\(id.description), \(snapshot), \(pair), 1, clock_timestamp() + make_interval(secs => \(seconds)), 1)
                ON CONFLICT (id) DO NOTHING
                RETURNING epoch
                """, logger: logger)
        }
        for try await epoch in rows.decode(Int64.self) { return epoch }
        return nil
    }

    /// A session whose owner's lease ran out while it was playing or paused.
    struct Orphan: Sendable {
        var id: SessionID
        var ownership: Ownership
        /// How long ago its lease ran out.
        var expiredFor: Duration
    }

    /// Sessions that were playing or paused and whose owner's lease ran out.
    func orphans(limit: Int = 500, within deadline: Duration? = nil) async throws -> [Orphan] {
        try await run(within: deadline) { connection, logger in
            let rows = try await connection.query(
                """
                SELECT id, owner, epoch, (EXTRACT(EPOCH FROM clock_timestamp() - lease_until) * 1000)::bigint FROM tonearm_session
                WHERE active AND lease_until <= clock_timestamp() ORDER BY updated_at LIMIT \(limit)
                """, logger: logger)
            var orphans: [Orphan] = []
            for try await (raw, owner, epoch, expiredMS) in rows.decode((String, String?, Int64, Int64).self) {
                guard let id = try? SessionID(raw) else { continue }
                orphans.append(
                    Orphan(id: id, ownership: Ownership(owner: owner, epoch: epoch, live: false), expiredFor: .milliseconds(expiredMS)))
            }
            return orphans
        }
    }

    /// Gives a session this pair owns at `epoch` straight to `pair`, with the snapshot it starts
    /// from (a hand-over); answers the new epoch, or nil when this pair no longer owned it. Late,
    /// it matches nothing, or hands over a session this pair still holds and no longer plays
    /// (its engine's play ended at the moment).
    func transfer(_ id: SessionID, epoch: Int64, to pair: String, lease: Duration, snapshot: String) async throws -> Int64? {
        let (me, seconds) = (pairID, Self.seconds(lease))
        return try await run { connection, logger in
            let rows = try await connection.query(
                """
                UPDATE tonearm_session SET owner = \(pair), epoch = epoch + 1, stored_epoch = epoch + 1, snapshot = \(snapshot),
                    active = true, lease_until = clock_timestamp() + make_interval(secs => \(seconds)),
                    updated_at = clock_timestamp(), renewed_at = clock_timestamp()
                WHERE id = \(id.description) AND owner = \(me) AND epoch = \(epoch)
                RETURNING epoch
                """, logger: logger)
            for try await epoch in rows.decode(Int64.self) { return epoch }
            return nil
        }
    }

    /// Lets go of a session this pair holds at `epoch` (released from memory, or drained away):
    /// its lease ends now, so another pair may take it at once. Late, it ends a lease this pair
    /// no longer renews (the session is no longer its own in memory).
    func release(_ id: SessionID, epoch: Int64) async throws {
        let me = pairID
        try await run { connection, logger in
            try await connection.query(
                """
                UPDATE tonearm_session SET owner = NULL, lease_until = clock_timestamp()
                WHERE id = \(id.description) AND owner = \(me) AND epoch = \(epoch)
                """, logger: logger)
        }
    }

    /// The stored snapshot (JSON) of a session, and how long its last owner went on renewing
    /// after writing it (in ms; what a playing session played after its last checkpoint).
    func snapshot(of id: SessionID) async throws -> (json: String, playedAfterMS: Int64)? {
        try await run { connection, logger in
            let rows = try await connection.query(
                """
                SELECT snapshot, coalesce(greatest(0, (EXTRACT(EPOCH FROM renewed_at - updated_at) * 1000)::bigint), 0)
                FROM tonearm_session WHERE id = \(id.description)
                """, logger: logger)
            for try await (json, played) in rows.decode((String, Int64).self) { return (json, played) }
            return nil
        }
    }

    /// Writes a session's snapshot if this pair still owns it at `epoch`; answers whether it did.
    /// Late, it writes what this pair stored last while it still holds the session (its next
    /// write follows), or matches nothing.
    func store(_ id: SessionID, json: String, active: Bool, epoch: Int64) async throws -> Bool {
        let me = pairID
        return try await run { connection, logger in
            let rows = try await connection.query(
                """
                UPDATE tonearm_session SET snapshot = \(json), active = \(active), updated_at = clock_timestamp(), stored_epoch = epoch
                WHERE id = \(id.description) AND owner = \(me) AND epoch = \(epoch)
                RETURNING 1
                """, logger: logger)
            for try await _ in rows.decode(Int.self) { return true }
            return false
        }
    }

    /// Copies one session from an SQLite database (`Router migrate-database`); one already in
    /// PostgreSQL is left as it is.
    func importSnapshot(_ id: SessionID, json: String, active: Bool) async throws -> Bool {
        try await run(within: .seconds(10)) { connection, logger in
            let rows = try await connection.query(
                """
                INSERT INTO tonearm_session (id, snapshot, active, stored_epoch) VALUES (\(id.description), \(json), \(active), 0)
                ON CONFLICT (id) DO NOTHING RETURNING 1
                """, logger: logger)
            for try await _ in rows.decode(Int.self) { return true }
            return false
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
