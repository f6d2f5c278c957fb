// What the pairs of a cluster share of Lavalink's sessions (docs/lavalink.md "In a cluster"): each
// session (its bot, whether it is kept for resuming and how long, and its home: the pair whose
// Router has its client's WebSocket, or had it last; only that one ends it), and each of its players with
// the pair that runs it and what a new pair needs to run it again (the voice object, the track,
// the volume). Any Router answers for any session; a player runs where its guild plays.
import Foundation
import Logging
import PostgresNIO
import WireProtocol

extension ClusterDatabase {
    static let lavalinkSchema: [PostgresQuery] = [
        """
        CREATE TABLE IF NOT EXISTS tonearm_lavalink_session (
            id text PRIMARY KEY,
            user_id text NOT NULL,
            resuming boolean NOT NULL DEFAULT false,
            timeout_seconds integer NOT NULL DEFAULT 60,
            home text)
        """,
        """
        CREATE TABLE IF NOT EXISTS tonearm_lavalink_player (
            session_id text NOT NULL,
            guild text NOT NULL,
            pair text NOT NULL,
            player text NOT NULL,
            PRIMARY KEY (session_id, guild))
        """,
        "CREATE INDEX IF NOT EXISTS tonearm_lavalink_player_guild ON tonearm_lavalink_player (guild)",
    ]

    /// A Lavalink session as every Router sees it.
    struct LavalinkSessionRow: Sendable, Equatable {
        var userID: String
        var resuming: Bool
        var timeout: Int
    }

    /// A new session, its client's WebSocket at this pair's Router.
    func openLavalinkSession(_ id: String, userID: String) async throws {
        let pair = pairID
        try await run { connection, logger in
            try await connection.query(
                "INSERT INTO tonearm_lavalink_session (id, user_id, home) VALUES (\(id), \(userID), \(pair)) ON CONFLICT (id) DO NOTHING",
                logger: logger)
        }
    }

    /// The client resumes `id` at this pair's Router, which becomes its home: nil when there is no
    /// such session of that bot kept for resuming.
    func resumeLavalinkSession(_ id: String, userID: String) async throws -> LavalinkSessionRow? {
        let pair = pairID
        return try await run { connection, logger in
            let rows = try await connection.query(
                """
                UPDATE tonearm_lavalink_session SET home = \(pair) WHERE id = \(id) AND user_id = \(userID) AND resuming
                RETURNING user_id, resuming, timeout_seconds
                """, logger: logger)
            for try await (user, resuming, timeout) in rows.decode((String, Bool, Int32).self) {
                return LavalinkSessionRow(userID: user, resuming: resuming, timeout: Int(timeout))
            }
            return nil
        }
    }

    func lavalinkSession(_ id: String) async throws -> LavalinkSessionRow? {
        try await run { connection, logger in
            let rows = try await connection.query(
                "SELECT user_id, resuming, timeout_seconds FROM tonearm_lavalink_session WHERE id = \(id)", logger: logger)
            for try await (user, resuming, timeout) in rows.decode((String, Bool, Int32).self) {
                return LavalinkSessionRow(userID: user, resuming: resuming, timeout: Int(timeout))
            }
            return nil
        }
    }

    /// Whether a pair's part of session `id` is still wanted while its home's feed is away: the
    /// session exists, and it is kept for resuming or its home's Router is heard from within
    /// `within` (a home that died without resuming ended it; a feed that failed comes back).
    func lavalinkSessionWanted(_ id: String, homeWithin within: Duration) async throws -> Bool {
        let seconds = Self.seconds(within)
        return try await run { connection, logger in
            let rows = try await connection.query(
                """
                SELECT s.resuming OR coalesce(p.seen_at > clock_timestamp() - make_interval(secs => \(seconds)), false)
                FROM tonearm_lavalink_session s LEFT JOIN tonearm_pair p ON p.id = s.home WHERE s.id = \(id)
                """, logger: logger)
            for try await wanted in rows.decode(Bool.self) { return wanted }
            return false
        }
    }

    /// `PATCH /v4/sessions/{id}`: the session after the change (nil: there is none).
    func configureLavalinkSession(_ id: String, resuming: Bool?, timeout: Int?) async throws -> LavalinkSessionRow? {
        let seconds = timeout.map { Int32(clamping: $0) }
        return try await run { connection, logger in
            let rows = try await connection.query(
                """
                UPDATE tonearm_lavalink_session SET resuming = coalesce(\(resuming), resuming),
                    timeout_seconds = coalesce(\(seconds), timeout_seconds)
                WHERE id = \(id) RETURNING user_id, resuming, timeout_seconds
                """, logger: logger)
            for try await (user, resuming, timeout) in rows.decode((String, Bool, Int32).self) {
                return LavalinkSessionRow(userID: user, resuming: resuming, timeout: Int(timeout))
            }
            return nil
        }
    }

    /// The session is over at its home, this pair: it and its players' rows go. Nothing, when its
    /// client has resumed it at another pair meanwhile.
    func endLavalinkSession(_ id: String) async throws {
        let pair = pairID
        try await run { connection, logger in
            try await connection.query(
                """
                WITH ended AS (DELETE FROM tonearm_lavalink_session WHERE id = \(id) AND home = \(pair) RETURNING id)
                DELETE FROM tonearm_lavalink_player WHERE session_id IN (SELECT id FROM ended)
                """, logger: logger)
        }
    }

    /// This pair runs the player now, as `player` (JSON) says; nothing when its session is gone.
    func saveLavalinkPlayer(session: String, guild: SessionID, player: String) async throws {
        let (pair, guild) = (pairID, guild.description)
        try await run { connection, logger in
            try await connection.query(
                """
                INSERT INTO tonearm_lavalink_player (session_id, guild, pair, player)
                SELECT id, \(guild), \(pair), \(player) FROM tonearm_lavalink_session WHERE id = \(session)
                ON CONFLICT (session_id, guild) DO UPDATE SET pair = excluded.pair, player = excluded.player
                """, logger: logger)
        }
    }

    /// The player is destroyed (by its client, or with its session): its row goes, if this pair
    /// still runs it.
    func deleteLavalinkPlayer(session: String, guild: SessionID) async throws {
        let (pair, guild) = (pairID, guild.description)
        try await run { connection, logger in
            try await connection.query(
                "DELETE FROM tonearm_lavalink_player WHERE session_id = \(session) AND guild = \(guild) AND pair = \(pair)", logger: logger)
        }
    }

    /// The players of `guild` (one a session), each with its session: what a pair that has just
    /// taken the guild on runs again.
    func lavalinkPlayers(of guild: SessionID) async throws -> [(session: String, row: LavalinkSessionRow, player: String)] {
        let guild = guild.description
        return try await run { connection, logger in
            let rows = try await connection.query(
                """
                SELECT p.session_id, s.user_id, s.resuming, s.timeout_seconds, p.player
                FROM tonearm_lavalink_player p JOIN tonearm_lavalink_session s ON s.id = p.session_id
                WHERE p.guild = \(guild)
                """, logger: logger)
            var found: [(String, LavalinkSessionRow, String)] = []
            for try await (session, user, resuming, timeout, player) in rows.decode((String, String, Bool, Int32, String).self) {
                found.append((session, LavalinkSessionRow(userID: user, resuming: resuming, timeout: Int(timeout)), player))
            }
            return found
        }
    }

    /// Where each player of `session` runs: its guild, its pair and that pair's address.
    func lavalinkPlayerPlaces(of session: String) async throws -> [(guild: String, pair: String, address: String?)] {
        try await run { connection, logger in
            let rows = try await connection.query(
                """
                SELECT p.guild, p.pair, t.address
                FROM tonearm_lavalink_player p LEFT JOIN tonearm_pair t ON t.id = p.pair
                WHERE p.session_id = \(session) ORDER BY p.guild
                """, logger: logger)
            var found: [(String, String, String?)] = []
            for try await (guild, pair, address) in rows.decode((String, String, String?).self) { found.append((guild, pair, address)) }
            return found
        }
    }
}
