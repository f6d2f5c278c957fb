// Every statement the cluster sends PostgreSQL has a deadline. A statement sent over a connection
// whose packets stopped arriving (the network cut) is not answered until TCP gives up, minutes
// later, and PostgresNIO cannot call a statement off once sent: the connection stays leased and
// its caller waits. So past the deadline the connection itself is closed: the statement fails
// at once, and the pool makes a fresh connection for the next one. A closed statement may still
// reach the server later (the kernel retransmits what was written), so every statement must be
// harmless when it arrives late; docs/cluster.md says why each one is.
import Logging
import NIOCore
import PostgresNIO
import Synchronization

extension PostgresClient {
    /// Runs `body` on a leased connection, or throws `TimeoutError` once `limit` has passed
    /// (waiting for a connection counts), closing the connection the statement is stuck on.
    func run<T: Sendable>(within limit: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let leased = Leased()
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                try await self.withConnection { connection in
                    leased.connection.withLock { $0 = connection }
                    // Leased just as the deadline passed: nothing is sent.
                    try Task.checkCancellation()
                    return try await body(connection)
                }
            }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            if let first = try await group.next(), let value = first { return value }
            // Past the deadline: a wait for a connection is called off by the cancellation, a
            // statement in flight fails when its connection closes.
            // The close is waited for (it takes a round on the event loop), so that the pool has
            // seen the connection go before the caller's next statement asks it for one.
            if let connection = leased.connection.withLock({ $0 }) {
                let closing: EventLoopFuture<Void> = connection.close()
                try? await closing.get()
            }
            throw TimeoutError(limit: limit)
        }
    }
}

/// The connection a statement with a deadline runs on, once it has one.
private final class Leased: Sendable {
    let connection = Mutex<PostgresConnection?>(nil)
}

/// Runs `body`, or throws `TimeoutError` after `limit`. The body must end when cancelled (the
/// group waits for it).
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw TimeoutError(limit: limit) }
        return value
    }
}

struct TimeoutError: Error, CustomStringConvertible {
    var limit: Duration
    var description: String { "no answer within \(limit)" }
}
