// The cluster's tables (Lavalink's in ClusterDatabase+Lavalink), made (and brought up to date) by
// whichever Router starts first.
import PostgresNIO

extension ClusterDatabase {
    /// Creates the tables when they are missing and adds the columns later versions use; several
    /// pairs starting at once take turns.
    func migrate() async throws {
        try await run(within: .seconds(30)) { connection, logger in
            try await connection.query("SELECT pg_advisory_lock(74661)", logger: logger)
            do {
                for statement in Self.schema + Self.lavalinkSchema { try await connection.query(statement, logger: logger) }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(74661)", logger: logger)
                throw error
            }
            try await connection.query("SELECT pg_advisory_unlock(74661)", logger: logger)
        }
    }

    private static let schema: [PostgresQuery] = [
        """
        CREATE TABLE IF NOT EXISTS tonearm_session (
            id text PRIMARY KEY,
            snapshot text NOT NULL,
            active boolean NOT NULL DEFAULT false,
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            owner text,
            epoch bigint NOT NULL DEFAULT 0,
            lease_until timestamptz NOT NULL DEFAULT 'epoch')
        """,
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
        """,
        "CREATE INDEX IF NOT EXISTS tonearm_session_owner ON tonearm_session (owner)",
        // When the owner last renewed: a session taken over played on until about then.
        "ALTER TABLE tonearm_session ADD COLUMN IF NOT EXISTS renewed_at timestamptz",
        // Whether the pair's engine takes new plays (its load report): placement tries the others first.
        "ALTER TABLE tonearm_pair ADD COLUMN IF NOT EXISTS admitting boolean NOT NULL DEFAULT true",
        // The epoch whose owner stored the snapshot: only that owner's renewals move `renewed_at`.
        "ALTER TABLE tonearm_session ADD COLUMN IF NOT EXISTS stored_epoch bigint",
        "UPDATE tonearm_session SET stored_epoch = epoch WHERE stored_epoch IS NULL",
        // Since when the pair's heartbeats have come without a gap.
        "ALTER TABLE tonearm_pair ADD COLUMN IF NOT EXISTS steady_since timestamptz",
    ]
}
