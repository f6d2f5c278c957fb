// What the pairs of a cluster share, in PostgreSQL (TONEARM_DATABASE_URL): each session's stored
// snapshot with its owner, the owner's fencing epoch and its lease, and each pair's heartbeat and
// load. docs/cluster.md describes the tables and why each statement is shaped as it is.
//
// Every statement that changes a session names the epoch it expects, so a pair that lost a
// session (its lease passed to another pair) can no longer write it: its writes match no row.
import Foundation
import Logging
import PostgresNIO
import WireProtocol

/// One pair's view of the shared database.
struct ClusterDatabase: Sendable {
    let client: PostgresClient
    let pairID: String
    let logger: Logger

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
    }

    /// A session row's ownership.
    struct Ownership: Sendable, Equatable {
        var owner: String?
        var epoch: Int64
        /// Whether the lease is still running by the database's clock.
        var live: Bool
    }

    /// Creates the tables when they are missing; several pairs starting at once take turns.
    func migrate() async throws {
        try await client.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(74661)", logger: logger)
            do {
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS tonearm_session (
                        id text PRIMARY KEY,
                        snapshot text NOT NULL,
                        active boolean NOT NULL DEFAULT false,
                        updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                        owner text,
                        epoch bigint NOT NULL DEFAULT 0,
                        lease_until timestamptz NOT NULL DEFAULT 'epoch')
                    """, logger: logger)
                try await connection.query(
                    """
                    CREATE TABLE IF NOT EXISTS tonearm_pair (
                        id text PRIMARY KEY,
                        address text NOT NULL,
                        seen_at timestamptz NOT NULL,
                        sessions integer NOT NULL DEFAULT 0,
                        max_sessions integer NOT NULL DEFAULT 0,
                        load double precision NOT NULL DEFAULT 0,
                        late_frames integer NOT NULL DEFAULT 0,
                        draining boolean NOT NULL DEFAULT false)
                    """, logger: logger)
                try await connection.query(
                    "CREATE INDEX IF NOT EXISTS tonearm_session_owner ON tonearm_session (owner)", logger: logger)
                // When the owner last renewed: a session taken over played on until about then.
                try await connection.query(
                    "ALTER TABLE tonearm_session ADD COLUMN IF NOT EXISTS renewed_at timestamptz", logger: logger)
                // Whether the pair's engine takes new plays (its load report): placement tries the others first.
                try await connection.query(
                    "ALTER TABLE tonearm_pair ADD COLUMN IF NOT EXISTS admitting boolean NOT NULL DEFAULT true", logger: logger)
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(74661)", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(74661)", logger: logger)
        }
    }

    // MARK: Pairs

    /// This pair's heartbeat: it is alive, where it answers, and what it carries.
    func heartbeat(
        address: String, sessions: Int, maxSessions: Int, load: Double, lateFrames: Int, draining: Bool, admitting: Bool = true
    ) async throws {
        try await client.query(
            """
            INSERT INTO tonearm_pair (id, address, seen_at, sessions, max_sessions, load, late_frames, draining, admitting)
            VALUES (\(pairID), \(address), clock_timestamp(), \(sessions), \(maxSessions), \(load), \(lateFrames), \(draining), \(admitting))
            ON CONFLICT (id) DO UPDATE SET address = excluded.address, seen_at = excluded.seen_at,
                sessions = excluded.sessions, max_sessions = excluded.max_sessions, load = excluded.load,
                late_frames = excluded.late_frames, draining = excluded.draining, admitting = excluded.admitting
            """, logger: logger)
    }

    /// The pairs heard from within `within` (by the database's clock), each with the sessions it
    /// holds a lease on now (counted from the sessions, so a placement just made counts at once).
    func livePairs(within: Duration) async throws -> [Pair] {
        let seconds = Double(within.components.seconds) + Double(within.components.attoseconds) / 1e18
        let rows = try await client.query(
            """
            SELECT p.id, p.address,
                (SELECT count(*)::integer FROM tonearm_session s WHERE s.owner = p.id AND s.lease_until > clock_timestamp()),
                p.max_sessions, p.load, p.late_frames, p.draining, p.admitting
            FROM tonearm_pair p
            WHERE p.seen_at > clock_timestamp() - make_interval(secs => \(seconds))
            """, logger: logger)
        var pairs: [Pair] = []
        for try await (id, address, sessions, maxSessions, load, late, draining, admitting) in rows.decode(
            (String, String, Int, Int, Double, Int, Bool, Bool).self)
        {
            pairs.append(
                Pair(
                    id: id, address: address, sessions: sessions, maxSessions: maxSessions, load: load, lateFrames: late,
                    draining: draining, admitting: admitting))
        }
        return pairs
    }

    /// Forgets this pair (a clean stop): the others need not wait for its heartbeat to age.
    func leave() async throws {
        try await client.query("DELETE FROM tonearm_pair WHERE id = \(pairID)", logger: logger)
    }

    // MARK: Sessions

    /// The session's ownership, nil when it was never stored.
    func ownership(of id: SessionID) async throws -> Ownership? {
        let rows = try await client.query(
            "SELECT owner, epoch, lease_until > clock_timestamp() FROM tonearm_session WHERE id = \(id.description)",
            logger: logger)
        for try await (owner, epoch, live) in rows.decode((String?, Int64, Bool).self) {
            return Ownership(owner: owner, epoch: epoch, live: live)
        }
        return nil
    }

    /// Gives the session to `pair` with a new epoch and a lease of `lease`, if its ownership is
    /// still `expected` (and its lease over, unless `expected` is this pair's own). Answers the new
    /// epoch, or nil when another pair changed it first. A session never stored gets its row.
    func assign(_ id: SessionID, to pair: String, expected: Ownership?, lease: Duration, snapshot: String) async throws -> Int64? {
        let seconds = Self.seconds(lease)
        let rows: PostgresRowSequence
        if let expected {
            rows = try await client.query(
                """
                UPDATE tonearm_session SET owner = \(pair), epoch = epoch + 1,
                    lease_until = clock_timestamp() + make_interval(secs => \(seconds))
                WHERE id = \(id.description) AND epoch = \(expected.epoch)
                    AND (lease_until <= clock_timestamp() OR owner IS NULL OR owner = \(pairID))
                RETURNING epoch
                """, logger: logger)
        } else {
            rows = try await client.query(
                """
                INSERT INTO tonearm_session (id, snapshot, owner, epoch, lease_until)
                VALUES (\(id.description), \(snapshot), \(pair), 1, clock_timestamp() + make_interval(secs => \(seconds)))
                ON CONFLICT (id) DO NOTHING
                RETURNING epoch
                """, logger: logger)
        }
        for try await epoch in rows.decode(Int64.self) { return epoch }
        return nil
    }

    /// Renews the lease of every session this pair owns; answers them with their epochs.
    func renew(lease: Duration) async throws -> [SessionID: Int64] {
        let rows = try await client.query(
            """
            UPDATE tonearm_session SET lease_until = clock_timestamp() + make_interval(secs => \(Self.seconds(lease))),
                renewed_at = clock_timestamp()
            WHERE owner = \(pairID)
            RETURNING id, epoch
            """, logger: logger)
        var owned: [SessionID: Int64] = [:]
        for try await (raw, epoch) in rows.decode((String, Int64).self) {
            if let id = try? SessionID(raw) { owned[id] = epoch }
        }
        return owned
    }

    /// A session whose owner's lease ran out while it was playing or paused.
    struct Orphan: Sendable {
        var id: SessionID
        var ownership: Ownership
        /// How long ago its lease ran out.
        var expiredFor: Duration
    }

    /// Sessions that were playing or paused and whose owner's lease ran out.
    func orphans(limit: Int = 500) async throws -> [Orphan] {
        let rows = try await client.query(
            """
            SELECT id, owner, epoch, (EXTRACT(EPOCH FROM clock_timestamp() - lease_until) * 1000)::bigint FROM tonearm_session
            WHERE active AND lease_until <= clock_timestamp() ORDER BY updated_at LIMIT \(limit)
            """, logger: logger)
        var orphans: [Orphan] = []
        for try await (raw, owner, epoch, expiredMS) in rows.decode((String, String?, Int64, Int64).self) {
            guard let id = try? SessionID(raw) else { continue }
            orphans.append(Orphan(id: id, ownership: Ownership(owner: owner, epoch: epoch, live: false), expiredFor: .milliseconds(expiredMS)))
        }
        return orphans
    }

    /// Lets go of a session this pair holds at `epoch` (released from memory, or drained away):
    /// its lease ends now, so another pair may take it at once.
    /// Gives a session this pair owns at `epoch` straight to `pair`, with the snapshot it starts
    /// from (a hand-over); answers the new epoch, or nil when this pair no longer owned it.
    func transfer(_ id: SessionID, epoch: Int64, to pair: String, lease: Duration, snapshot: String) async throws -> Int64? {
        let rows = try await client.query(
            """
            UPDATE tonearm_session SET owner = \(pair), epoch = epoch + 1, snapshot = \(snapshot), active = true,
                lease_until = clock_timestamp() + make_interval(secs => \(Self.seconds(lease))),
                updated_at = clock_timestamp(), renewed_at = clock_timestamp()
            WHERE id = \(id.description) AND owner = \(pairID) AND epoch = \(epoch)
            RETURNING epoch
            """, logger: logger)
        for try await epoch in rows.decode(Int64.self) { return epoch }
        return nil
    }

    func release(_ id: SessionID, epoch: Int64) async throws {
        try await client.query(
            """
            UPDATE tonearm_session SET owner = NULL, lease_until = clock_timestamp()
            WHERE id = \(id.description) AND owner = \(pairID) AND epoch = \(epoch)
            """, logger: logger)
    }

    /// The stored snapshot (JSON) of a session, and how long its last owner went on renewing
    /// after writing it (in ms; what a playing session played after its last checkpoint).
    func snapshot(of id: SessionID) async throws -> (json: String, playedAfterMS: Int64)? {
        let rows = try await client.query(
            """
            SELECT snapshot, coalesce(greatest(0, (EXTRACT(EPOCH FROM renewed_at - updated_at) * 1000)::bigint), 0)
            FROM tonearm_session WHERE id = \(id.description)
            """, logger: logger)
        for try await (json, played) in rows.decode((String, Int64).self) { return (json, played) }
        return nil
    }

    /// Writes a session's snapshot if this pair still owns it at `epoch`; answers whether it did.
    func store(_ id: SessionID, json: String, active: Bool, epoch: Int64) async throws -> Bool {
        let rows = try await client.query(
            """
            UPDATE tonearm_session SET snapshot = \(json), active = \(active), updated_at = clock_timestamp()
            WHERE id = \(id.description) AND owner = \(pairID) AND epoch = \(epoch)
            RETURNING 1
            """, logger: logger)
        for try await _ in rows.decode(Int.self) { return true }
        return false
    }

    /// Copies one session from an SQLite database (`Router migrate-database`); one already in
    /// PostgreSQL is left as it is.
    func importSnapshot(_ id: SessionID, json: String, active: Bool) async throws -> Bool {
        let rows = try await client.query(
            """
            INSERT INTO tonearm_session (id, snapshot, active) VALUES (\(id.description), \(json), \(active))
            ON CONFLICT (id) DO NOTHING RETURNING 1
            """, logger: logger)
        for try await _ in rows.decode(Int.self) { return true }
        return false
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

extension PostgresClient.Configuration {
    /// `postgres://user:password@host:port/database` (or `postgresql://`); a host starting with
    /// `/` (percent-encoded, or `?host=/dir`) is a Unix socket directory.
    static func parse(url text: String) throws -> PostgresClient.Configuration {
        guard let url = URLComponents(string: text), ["postgres", "postgresql"].contains(url.scheme ?? "") else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL is not a postgres://user:password@host:port/database URL")
        }
        let user = url.user ?? "postgres"
        let password = url.password
        let database = url.path.isEmpty ? nil : String(url.path.dropFirst())
        let socketDirectory = url.queryItems?.first { $0.name == "host" }?.value
        if let directory = socketDirectory, directory.hasPrefix("/") {
            let port = url.port ?? 5432
            return .init(unixSocketPath: "\(directory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        guard let host = url.host, !host.isEmpty else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL names no host")
        }
        guard let port = url.port ?? Optional(5432), (1...65535).contains(port) else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL has no valid port")
        }
        return .init(host: host, port: port, username: user, password: password, database: database, tls: .disable)
    }
}
