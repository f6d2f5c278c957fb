// A limit on work that costs a process or a thread each (yt-dlp runs, sources opened to describe
// them): at most `limit` at once, at most one per owner (a session) at a time, at most
// `queueLimit` more waiting, each for at most `maxWait`. Beyond that the caller is told to come
// back later (503 with Retry-After) instead of the engine starting processes and threads without
// bound for whoever asks, or one session taking every place.
import HTTPTypes
import ServiceSupport

/// Admits at most `limit` holders at a time, one per owner; a bounded, time-limited queue for the rest.
package actor ConcurrencyGate {
    package struct Limits: Sendable {
        package var limit: Int
        package var queueLimit: Int
        package var maxWait: Duration
        package init(limit: Int = 4, queueLimit: Int = 16, maxWait: Duration = .seconds(5)) {
            self.limit = limit
            self.queueLimit = queueLimit
            self.maxWait = maxWait
        }
    }

    private struct Waiter {
        let id: UInt64
        let owner: String?
        /// Set once its task has parked.
        var continuation: CheckedContinuation<Bool, Never>?
    }

    let limits: Limits
    private let what: String
    private var running = 0
    /// Owners holding a place now.
    private var holders: Set<String> = []
    /// In arrival order.
    private var waiters: [Waiter] = []
    /// Waiters settled before they parked, with the outcome they will find.
    private var decided: [UInt64: Bool] = [:]
    private var nextID: UInt64 = 0

    /// `what` names the work in the refusal ("yt-dlp runs").
    package init(_ what: String, limits: Limits = .init()) {
        self.what = what
        self.limits = limits
    }

    /// Runs `work` once admitted; throws 503 `resolver_busy` when the queue is full or the wait
    /// runs out. Work of an `owner` that holds a place already waits for it to end.
    func run<T: Sendable>(owner: String? = nil, _ work: @Sendable () async throws -> T) async throws -> T {
        try await acquire(owner: owner)
        do {
            let result = try await work()
            release(owner: owner)
            return result
        } catch {
            release(owner: owner)
            throw error
        }
    }

    /// Waits for a place; every successful `acquire` needs one `release` with the same owner. The
    /// wait is a pair of child tasks of the caller (the waiter and its timer), so a cancelled
    /// caller stops waiting.
    func acquire(owner: String? = nil) async throws(APIError) {
        if running < limits.limit && owner.map({ !holders.contains($0) }) ?? true {
            admit(owner)
            return
        }
        guard waiters.count < limits.queueLimit else { throw busy() }
        let id = nextID
        nextID += 1
        waiters.append(Waiter(id: id, owner: owner))
        let wait = limits.maxWait
        let admitted = await withTaskGroup(of: Bool?.self) { group in
            group.addTask { await self.park(id) }
            group.addTask {
                try? await Task.sleep(for: wait)
                await self.decide(id, admitted: false)
                return nil
            }
            var admitted = false
            while let result = await group.next() {
                if let result {
                    admitted = result
                    group.cancelAll()
                }
            }
            return admitted
        }
        guard admitted else { throw busy() }
    }

    /// Gives the place back and hands the free places to the longest waiters that may take them.
    func release(owner: String? = nil) {
        running -= 1
        if let owner { holders.remove(owner) }
        for waiter in waiters where running < limits.limit && waiter.owner.map({ !holders.contains($0) }) ?? true {
            admit(waiter.owner)
            decide(waiter.id, admitted: true)
        }
    }

    private func admit(_ owner: String?) {
        running += 1
        if let owner { holders.insert(owner) }
    }

    /// Settles waiter `id` once (admitted by a release, or not by its timer); later calls do nothing.
    private func decide(_ id: UInt64, admitted: Bool) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        let waiter = waiters.remove(at: index)
        if let continuation = waiter.continuation {
            continuation.resume(returning: admitted)
        } else {
            decided[id] = admitted  // settled before the waiter parked
        }
    }

    /// Waits until waiter `id` is settled.
    private func park(_ id: UInt64) async -> Bool {
        if let admitted = decided.removeValue(forKey: id) { return admitted }
        return await withCheckedContinuation { continuation in
            guard let index = waiters.firstIndex(where: { $0.id == id }) else {
                continuation.resume(returning: false)
                return
            }
            waiters[index].continuation = continuation
        }
    }

    private func busy() -> APIError {
        APIError(
            status: .serviceUnavailable, code: "resolver_busy",
            message: "\(running) \(what) are running and \(waiters.count) waiting; try again in a few seconds",
            retryAfterSeconds: 5)
    }

    /// Holders and waiters now, for health and tests.
    var load: (running: Int, waiting: Int) { (running, waiters.count) }
}
