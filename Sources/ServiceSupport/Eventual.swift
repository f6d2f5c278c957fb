// A value that arrives once, which any number of tasks may wait for, each for as long as it
// likes: the outcome of a track the Router resolves in the background, which the command that
// asked for it waits for only briefly. Waiting is cancellable; setting never waits.
//
// A pthread mutex (NIO's), not `Synchronization.Mutex`: a setter and a waiter contend for it by
// design, and ThreadSanitizer cannot see the Mutex's contended futex path (it reports the locked
// accesses as a race, as it did for the playback outbox).
import NIOConcurrencyHelpers

/// Set once (later sets are ignored); read or awaited from anywhere.
package final class Eventual<Value: Sendable>: Sendable {
    private struct State {
        var value: Value?
        var waiters: [UInt64: CheckedContinuation<Value?, Never>] = [:]
        /// Waiters cancelled before they parked.
        var gone: Set<UInt64> = []
        var next: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    /// The value, if it has arrived.
    package var value: Value? { state.withLockedValue { $0.value } }

    /// Sets the value and wakes every waiter; answers false (and changes nothing) if it was set.
    @discardableResult
    package func set(_ value: Value) -> Bool {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Value?, Never>]? in
            guard state.value == nil else { return nil }
            state.value = value
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        guard let waiters else { return false }
        for waiter in waiters { waiter.resume(returning: value) }
        return true
    }

    /// The value once it arrives; nil if the calling task is cancelled first.
    package func wait() async -> Value? {
        let id = state.withLockedValue { state -> UInt64 in
            defer { state.next &+= 1 }
            return state.next
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
                let now = state.withLockedValue { state -> Value?? in
                    if let value = state.value { return .some(value) }
                    if state.gone.remove(id) != nil { return .some(nil) }
                    state.waiters[id] = continuation
                    return .none
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state -> CheckedContinuation<Value?, Never>? in
                guard state.value == nil else { return nil }
                guard let waiter = state.waiters.removeValue(forKey: id) else {
                    state.gone.insert(id)
                    return nil
                }
                return waiter
            }
            waiter?.resume(returning: nil)
        }
    }

    /// The value if it arrives within `timeout`, else nil.
    package func value(within timeout: Duration) async -> Value? {
        if let value { return value }
        return await withTaskGroup(of: Value?.self) { group in
            group.addTask { await self.wait() }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            return await group.next() ?? nil
        }
    }
}
