// SQLite (the C library) behind one wrapper: a connection to one file, used one statement at a
// time on a queue of its own, so no call blocks the cooperative pool (SessionDatabase). Errors are
// typed; no handle leaves this file.
import CSQLite
import Dispatch
import NIOConcurrencyHelpers

struct SQLiteError: Error, CustomStringConvertible {
    let code: Int32
    let message: String
    var description: String { "SQLite error \(code): \(message)" }
}

/// A value bound to a statement or read from a row.
enum SQLiteValue: Sendable, Equatable {
    case text(String)
    case integer(Int64)
    case double(Double)
    case null

    var text: String? { if case .text(let value) = self { value } else { nil } }
}

final class SQLiteConnection: @unchecked Sendable {
    // @unchecked: the handle is only used on `queue`, by one statement at a time.
    private let handle: OpaquePointer
    private let queue = DispatchQueue(label: "tonearm.sqlite")

    /// Opens (creating when needed) the file at `path`; `:memory:` keeps the database in memory.
    /// A statement waits up to `busyTimeoutMS` for another process's lock on the file.
    init(path: String, busyTimeoutMS: Int32 = 5_000) throws {
        var opened: OpaquePointer?
        let status = sqlite3_open_v2(path, &opened, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nil)
        guard status == SQLITE_OK, let opened else {
            let message = opened.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open \(path)"
            sqlite3_close_v2(opened)
            throw SQLiteError(code: status, message: message)
        }
        handle = opened
        sqlite3_busy_timeout(handle, busyTimeoutMS)
    }

    deinit { sqlite3_close_v2(handle) }

    /// Runs `body` on the connection's queue, off the caller's thread. Its result comes back
    /// through a lock as well as the continuation: ThreadSanitizer sees a pthread lock, but not the
    /// ordering a continuation resumed from a dispatch queue gives (it reported the rows built on
    /// the queue and read after the `await` as a race, 2026-11-27).
    func run<T: Sendable>(_ body: @escaping @Sendable (SQLiteConnection) throws -> T) async throws -> T {
        let handOff = NIOLockedValueBox<Result<T, any Error>?>(nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                let result = Result { try body(self) }
                handOff.withLockedValue { $0 = result }
                continuation.resume()
            }
        }
        guard let result = handOff.withLockedValue({ $0 }) else { throw SQLiteError(code: SQLITE_MISUSE, message: "the queue ran nothing") }
        return try result.get()
    }

    /// Runs `body` on the connection's queue, the caller waiting (the last write when the
    /// Router stops, whether or not its task was cancelled).
    func runBlocking<T>(_ body: (SQLiteConnection) throws -> T) throws -> T {
        try queue.sync { try body(self) }
    }

    /// Runs one statement that answers no rows.
    func execute(_ sql: String, _ arguments: [SQLiteValue] = []) throws {
        _ = try rows(sql, arguments)
    }

    /// The rows one statement answers, each a list of its columns' values.
    func rows(_ sql: String, _ arguments: [SQLiteValue] = []) throws -> [[SQLiteValue]] {
        var prepared: OpaquePointer?
        try check(sqlite3_prepare_v2(handle, sql, -1, &prepared, nil))
        guard let statement = prepared else { return [] }  // only a comment or whitespace
        defer { sqlite3_finalize(statement) }
        for (index, value) in arguments.enumerated() { try bind(value, at: Int32(index + 1), in: statement) }
        var answered: [[SQLiteValue]] = []
        while true {
            let status = sqlite3_step(statement)
            if status == SQLITE_DONE { return answered }
            guard status == SQLITE_ROW else { throw error(status) }
            answered.append((0..<sqlite3_column_count(statement)).map { column(statement, $0) })
        }
    }

    /// Runs `body` in one transaction: committed if it returns, rolled back if it throws.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN IMMEDIATE")
        do {
            let result = try body()
            try execute("COMMIT")
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    private func bind(_ value: SQLiteValue, at index: Int32, in statement: OpaquePointer) throws {
        let status: Int32
        switch value {
        case .text(let text): status = sqlite3_bind_text(statement, index, text, -1, tonearm_sqlite_transient())
        case .integer(let number): status = sqlite3_bind_int64(statement, index, number)
        case .double(let number): status = sqlite3_bind_double(statement, index, number)
        case .null: status = sqlite3_bind_null(statement, index)
        }
        try check(status)
    }

    private func column(_ statement: OpaquePointer, _ index: Int32) -> SQLiteValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: .double(sqlite3_column_double(statement, index))
        case SQLITE_NULL: .null
        default: sqlite3_column_text(statement, index).map { .text(String(cString: $0)) } ?? .null
        }
    }

    private func check(_ status: Int32) throws {
        guard status == SQLITE_OK else { throw error(status) }
    }

    private func error(_ status: Int32) -> SQLiteError {
        SQLiteError(code: status, message: String(cString: sqlite3_errmsg(handle)))
    }
}
