// Cancelling work from outside the task that runs it. The owner of a job (a play, a session's
// command, a request whose client may leave) keeps the signal; the job runs inside `run`, whose
// task is cancelled when the signal fires — so a yt-dlp it started is killed, a connection it
// opened is closed and a slot it holds is given back at once, by the code that already does so
// on cancellation.

/// Fires once; every `run` in progress, and every later one, is cancelled by it.
package final class CancellationSignal: Sendable {
    private let fired = Eventual<Void>()

    package init() {}

    package var isFired: Bool { fired.value != nil }

    /// Cancels every `run` in progress and every later one. Idempotent.
    package func fire() { fired.set(()) }

    /// Runs `work` in a child task that is cancelled when the signal fires (or when the caller
    /// is cancelled); throws `CancellationError` if the signal fired before `work` finished.
    package func run<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async throws -> T {
        if isFired { throw CancellationError() }
        return try await withThrowingTaskGroup(of: Race<T>.self) { group in
            group.addTask { .done(try await work()) }
            group.addTask {
                _ = await self.fired.wait()
                return .interrupted
            }
            defer { group.cancelAll() }
            guard case .done(let value) = try await group.next() else { throw CancellationError() }
            return value
        }
    }
}

/// Which child of a race between some work and what may interrupt it finished first.
package enum Race<T: Sendable>: Sendable {
    case done(T)
    case interrupted
}
