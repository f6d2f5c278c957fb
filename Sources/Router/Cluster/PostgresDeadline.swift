// Every statement the cluster sends PostgreSQL has a deadline. A statement sent over a connection
// whose packets stopped arriving (the network cut) is not answered until TCP gives up, minutes
// later, and PostgresNIO cannot call a statement off once sent: the connection stays leased and
// its caller waits. So past the deadline the connection itself is closed: the statement fails
// at once, and the pool makes a fresh connection for the next one. A closed statement may still
// reach the server later (the kernel retransmits what was written), so every statement must be
// harmless when it arrives late; docs/cluster.md says why each one is.
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

extension PostgresClient {
    /// Runs `body` on a leased connection, or throws `TimeoutError` once `limit` has passed
    /// (waiting for a connection counts), closing the connection the statement is stuck on.
    ///
    /// Past the deadline the caller waits for the statement's task to end (it normally does at
    /// once), but `abandonAfter` at most: the task runs on its own, and is then left to end by
    /// itself. (It was a child of a task group, which waits for every child however long: after
    /// PostgreSQL had been away, or a pair cut off from it, a wait for a pooled connection that
    /// did not end when cancelled held a round, or a relayed client's placement, for good.)
    func run<T: Sendable>(
        within limit: Duration, abandonAfter: Duration = .seconds(5),
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let leased = Leased()
        let answer = Answer<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                answer.wait(continuation)
                let work = Task {
                    defer { answer.workEnded() }
                    do {
                        let value = try await self.withConnection { connection in
                            leased.connection.withLockedValue { $0 = connection }
                            // Leased just as the deadline passed: nothing is sent.
                            try Task.checkCancellation()
                            return try await body(connection)
                        }
                        answer.give(.success(value))
                    } catch {
                        answer.give(.failure(error))
                    }
                }
                answer.work(work)
                answer.timer(Task {
                    try? await Task.sleep(for: limit)
                    guard !Task.isCancelled, answer.decide(byTimer: true) else { return }
                    // Past the deadline: a wait for a connection is called off, a statement in
                    // flight fails when its connection closes. The caller waits for the work to
                    // end, so that the pool has seen its connection go before the caller's next
                    // statement asks it for one, and so that a pair sends no more statements
                    // than it has ended; but no longer than `abandonAfter`.
                    work.cancel()
                    if let connection = leased.connection.withLockedValue({ $0 }) {
                        let closing: EventLoopFuture<Void> = connection.close()
                        try? await closing.get()
                    }
                    let abandonAt = ContinuousClock.now + abandonAfter
                    while !answer.hasWorkEnded && ContinuousClock.now < abandonAt { try? await Task.sleep(for: .milliseconds(10)) }
                    answer.deliver(.failure(TimeoutError(limit: limit)))
                })
            }
        } onCancel: {
            // The work ends with the cancellation, and answers; the deadline still bounds it.
            answer.cancelWork()
        }
    }
}

/// The connection a statement with a deadline runs on, once it has one.
///
/// Pthread mutexes (NIO's), not `Synchronization.Mutex`, here and in `Answer`: the work, its
/// timer and the caller contend for them, and ThreadSanitizer cannot see the Mutex's contended
/// futex path (it reported `Answer`'s locked accesses as a race in CI, 2026-11-28).
private final class Leased: Sendable {
    let connection = NIOLockedValueBox<PostgresConnection?>(nil)
}

/// A statement's answer, given once: its result, or the deadline's error once the work has
/// ended or been abandoned, whichever comes first. The statement's result calls the deadline's
/// timer off; a failure also cancels the work.
private final class Answer<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        /// The answer, when it came before the caller waited.
        var early: Result<T, any Error>?
        var work: Task<Void, Never>?
        var timer: Task<Void, Never>?
        /// Whether the answer is decided (it may still be on its way to the caller).
        var decided = false
        var workEnded = false
        var cancelRequested = false
    }
    private let state = NIOLockedValueBox(State())

    func wait(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLockedValue { state -> Result<T, any Error>? in
            if state.early == nil { state.continuation = continuation }
            return state.early
        }
        if let early { continuation.resume(with: early) }
    }

    func work(_ task: Task<Void, Never>) {
        let cancelled = state.withLockedValue { state -> Bool in
            state.work = task
            return state.cancelRequested
        }
        // The caller was cancelled before it started.
        if cancelled { task.cancel() }
    }

    func timer(_ task: Task<Void, Never>) {
        let decided = state.withLockedValue { state -> Bool in
            state.timer = task
            return state.decided
        }
        if decided { task.cancel() }
    }

    func cancelWork() {
        state.withLockedValue { state in
            state.cancelRequested = true
            return state.work
        }?.cancel()
    }

    func workEnded() { state.withLockedValue { $0.workEnded = true } }
    var hasWorkEnded: Bool { state.withLockedValue { $0.workEnded } }

    /// Decides the answer now, to be delivered later; false when it was decided already. What
    /// the deadline does before its error goes out (closing the connection, which fails the
    /// statement) then cannot answer instead of it.
    func decide(byTimer: Bool = false) -> Bool {
        let (won, timer) = state.withLockedValue { state -> (Bool, Task<Void, Never>?) in
            guard !state.decided else { return (false, nil) }
            state.decided = true
            return (true, state.timer)
        }
        if won && !byTimer { timer?.cancel() }
        return won
    }

    /// Decides and delivers `result`, unless the answer was decided already.
    func give(_ result: Result<T, any Error>) {
        guard decide() else { return }
        deliver(result)
    }

    /// Delivers the answer decided.
    func deliver(_ result: Result<T, any Error>) {
        let (continuation, work) = state.withLockedValue { state -> (CheckedContinuation<T, any Error>?, Task<Void, Never>?) in
            let continuation = state.continuation
            if continuation == nil { state.early = result }
            state.continuation = nil
            return (continuation, state.work)
        }
        continuation?.resume(with: result)
        if case .failure = result { work?.cancel() }
    }
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
