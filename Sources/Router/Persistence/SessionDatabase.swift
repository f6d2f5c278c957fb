// Queues and settings in SQLite, so a Router restart brings every session back as it was. One row
// per session holding its snapshot as JSON (the table an earlier version made with GRDB's
// migrator; its `grdb_migrations` table is left as it is). Writes go through `PersistenceWriter`,
// which coalesces them off the audio path.
import Foundation
import ServiceSupport
import WireProtocol

/// The Router's SQLite file.
struct SessionDatabase: Sendable {
    private let connection: SQLiteConnection

    /// Opens (creating when needed) the database at `path`; `:memory:` keeps it in memory.
    init(path: String) throws {
        if path != ":memory:" {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        }
        connection = try SQLiteConnection(path: path)
        try connection.runBlocking { database in
            try database.execute(
                "CREATE TABLE IF NOT EXISTS session (id TEXT NOT NULL PRIMARY KEY, snapshot TEXT NOT NULL, updated_at DOUBLE NOT NULL)")
        }
    }

    /// The stored snapshot of one session.
    func load(_ id: SessionID) async throws -> SessionSnapshot? {
        let json = try await connection.run { database in
            try database.rows("SELECT snapshot FROM session WHERE id = ?", [.text(id.description)]).first?.first?.text
        }
        return try json.map { try JSONDecoder().decode(SessionSnapshot.self, from: Data($0.utf8)) }
    }

    /// Every stored session, as its JSON (a copy into a cluster's PostgreSQL).
    func loadAllJSON() async throws -> [(id: String, json: String)] {
        try await connection.run { database in
            try database.rows("SELECT id, snapshot FROM session ORDER BY id").map { row in (row[0].text ?? "", row[1].text ?? "") }
        }
    }

    /// Every stored session whose queue was playing or paused when it was last written.
    func loadActive() async throws -> [SessionID: SessionSnapshot] {
        let rows = try await connection.run { database in
            try database.rows("SELECT id, snapshot FROM session").map { row in (row[0].text ?? "", row[1].text ?? "") }
        }
        var active: [SessionID: SessionSnapshot] = [:]
        for (raw, json) in rows {
            guard let id = try? SessionID(raw),
                let snapshot = try? JSONDecoder().decode(SessionSnapshot.self, from: Data(json.utf8)),
                snapshot.queue.status != .idle
            else { continue }
            active[id] = snapshot
        }
        return active
    }

    /// Writes a batch of snapshots in one transaction.
    func save(_ batch: [SessionID: SessionSnapshot]) async throws {
        let rows = try Self.rows(batch)
        try await connection.run { try Self.upsert(rows, $0) }
    }

    /// Writes a batch on the calling thread, whether or not its task was cancelled: the last
    /// write when the Router stops.
    func saveBlocking(_ batch: [SessionID: SessionSnapshot]) throws {
        let rows = try Self.rows(batch)
        try connection.runBlocking { try Self.upsert(rows, $0) }
    }

    private static func rows(_ batch: [SessionID: SessionSnapshot]) throws -> [(String, String)] {
        try batch.map { ($0.key.description, String(decoding: try JSONCoding.encoder.encode($0.value), as: UTF8.self)) }
    }

    private static func upsert(_ rows: [(String, String)], _ database: SQLiteConnection) throws {
        let now = Date().timeIntervalSince1970
        try database.transaction {
            for (id, json) in rows {
                try database.execute(
                    """
                    INSERT INTO session (id, snapshot, updated_at) VALUES (?, ?, ?)
                    ON CONFLICT(id) DO UPDATE SET snapshot = excluded.snapshot, updated_at = excluded.updated_at
                    """, [.text(id), .text(json), .double(now)])
            }
        }
    }
}
