// Queues and settings in SQLite (GRDB), so a Router restart brings every session back as it was.
// One row per session holding its snapshot as JSON; the schema is versioned by GRDB's migrator.
// Writes go through `PersistenceWriter`, which coalesces them off the audio path.
import Foundation
import GRDB
import ServiceSupport
import WireProtocol

/// The Router's SQLite file.
struct SessionDatabase: Sendable {
    private let writer: DatabaseQueue

    /// Opens (creating when needed) the database at `path`; `:memory:` keeps it in memory.
    init(path: String) throws {
        if path != ":memory:" {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        }
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        writer = path == ":memory:" ? try DatabaseQueue(configuration: configuration) : try DatabaseQueue(path: path, configuration: configuration)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: sessions") { db in
            try db.create(table: "session") { table in
                table.primaryKey("id", .text)
                table.column("snapshot", .text).notNull()
                table.column("updated_at", .double).notNull()
            }
        }
        try migrator.migrate(writer)
    }

    /// The stored snapshot of one session.
    func load(_ id: SessionID) async throws -> SessionSnapshot? {
        let json = try await writer.read { db in
            try String.fetchOne(db, sql: "SELECT snapshot FROM session WHERE id = ?", arguments: [id.description])
        }
        return try json.map { try JSONDecoder().decode(SessionSnapshot.self, from: Data($0.utf8)) }
    }

    /// Every stored session, as its JSON (a copy into a cluster's PostgreSQL).
    func loadAllJSON() async throws -> [(id: String, json: String)] {
        try await writer.read { db in
            try Row.fetchAll(db, sql: "SELECT id, snapshot FROM session ORDER BY id").map { row in (row["id"], row["snapshot"]) }
        }
    }

    /// Every stored session whose queue was playing or paused when it was last written.
    func loadActive() async throws -> [SessionID: SessionSnapshot] {
        let rows: [(id: String, json: String)] = try await writer.read { db in
            try Row.fetchAll(db, sql: "SELECT id, snapshot FROM session").map { row in (row["id"], row["snapshot"]) }
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
        try await writer.write { db in try Self.upsert(rows, db) }
    }

    /// Writes a batch on the calling thread, whether or not its task was cancelled: the last
    /// write when the Router stops (GRDB's async writes give up on a cancelled task).
    func saveBlocking(_ batch: [SessionID: SessionSnapshot]) throws {
        let rows = try Self.rows(batch)
        try writer.write { db in try Self.upsert(rows, db) }
    }

    private static func rows(_ batch: [SessionID: SessionSnapshot]) throws -> [(String, String)] {
        try batch.map { ($0.key.description, String(decoding: try JSONCoding.encoder.encode($0.value), as: UTF8.self)) }
    }

    private static func upsert(_ rows: [(String, String)], _ db: Database) throws {
        let now = Date().timeIntervalSince1970
        for (id, json) in rows {
            try db.execute(
                sql: """
                    INSERT INTO session (id, snapshot, updated_at) VALUES (?, ?, ?)
                    ON CONFLICT(id) DO UPDATE SET snapshot = excluded.snapshot, updated_at = excluded.updated_at
                    """,
                arguments: [id, json, now])
        }
    }
}
