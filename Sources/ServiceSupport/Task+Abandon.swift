// Waiting for a task that only a timeout ends (a connection attempt to a host that is cut off)
// without being held by it: the waiter goes on when it is cancelled, the task is left to end.
import Synchronization

extension Task where Failure == any Error {
    /// The task's result, or nil as soon as the caller is cancelled: the task is then cancelled
    /// and left to end by itself (a connection attempt that only a timeout ends).
    package func resultUnlessCancelled() async -> Result<Success, any Error>? {
        let waiting = ResumeOnce<Result<Success, any Error>?>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                waiting.hold(continuation)
                _Concurrency.Task<Void, Never> { waiting.resume(returning: await self.result) }
                if _Concurrency.Task<Never, Never>.isCancelled { waiting.resume(returning: nil) }
            }
        } onCancel: {
            self.cancel()
            waiting.resume(returning: nil)
        }
    }
}

/// A continuation resumed by whichever comes first; later ones are ignored.
package final class ResumeOnce<T: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<T, Never>?>(nil)

    package init() {}

    package func hold(_ continuation: CheckedContinuation<T, Never>) { self.continuation.withLock { $0 = continuation } }

    package func resume(returning value: T) { continuation.withLock { $0.take() }?.resume(returning: value) }
}
