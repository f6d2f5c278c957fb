// Takes snapshots from session controllers without waiting and writes the newest of each in one
// transaction a moment later, so a burst of changes costs one write and nothing on the audio
// path ever waits for the disk. Flushes what is left when the Router stops.
//
// When the disk refuses (full, read-only), nothing else stops: commands are applied as usual, the
// newest snapshot of each session waits here, and the write is tried again (after 1 s, then up to
// every 5 s) until the disk takes it — the Router recovers by itself. `/health` says how many
// sessions wait meanwhile. A write either lands whole or not at all (one SQLite transaction), so
// nothing stored before is lost; what waits here is lost only if the Router is killed meanwhile.
import Logging
import ServiceLifecycle
import Synchronization
import WireProtocol

final class PersistenceWriter: Service, Sendable {
    /// How writing goes, for `/health` and `/metrics`.
    struct Status: Sendable, Equatable {
        /// Sessions whose newest snapshot is not stored yet.
        var unsaved = 0
        /// Writes the disk refused so far.
        var failures: UInt64 = 0
        /// Why the last write failed, while writes fail.
        var error: String?
        var ok: Bool { error == nil }
    }

    private let database: any SessionStorage
    private let logger: Logger
    private let delay: Duration
    private let retry: Duration
    private let pending = Mutex<[SessionID: SessionSnapshot]>([:])
    private let state = Mutex(Status())
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>

    init(database: any SessionStorage, logger: Logger, delay: Duration = .milliseconds(200), retry: Duration = .seconds(1)) {
        self.database = database
        self.logger = logger
        self.delay = delay
        self.retry = retry
        (wakes, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Queues `snapshot` as the newest state of `id`; returns at once.
    func save(_ id: SessionID, _ snapshot: SessionSnapshot) {
        pending.withLock { $0[id] = snapshot }
        wake.yield()
    }

    var status: Status {
        var status = state.withLock { $0 }
        status.unsaved = pending.withLock { $0.count }
        return status
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { retries in
                var failedInARow = 0
                for await _ in self.wakes {
                    try? await Task.sleep(for: self.delay)
                    if Task.isCancelled { break }
                    guard await self.flush() else {
                        // Tried again later whether or not anything changes meanwhile.
                        failedInARow += 1
                        let wait = min(self.retry * failedInARow, .seconds(5))
                        retries.addTask {
                            try? await Task.sleep(for: wait)
                            self.wake.yield()
                        }
                        continue
                    }
                    failedInARow = 0
                }
                retries.cancelAll()
            }
        }
        // Also when the service was cancelled rather than shut down gracefully: nothing is lost.
        flushNow()
    }

    /// Writes everything queued so far; answers whether the disk took it.
    private func flush() async -> Bool {
        let batch = takePending()
        guard !batch.isEmpty else { return true }
        do {
            try await database.save(batch)
            stored()
            return true
        } catch {
            keep(batch, after: error)
            return false
        }
    }

    /// Writes everything queued, on the calling thread (the last write before the Router exits).
    func flushNow() {
        let batch = takePending()
        guard !batch.isEmpty else { return }
        do {
            try database.saveBlocking(batch)
            stored()
        } catch {
            keep(batch, after: error)
        }
    }

    private func takePending() -> [SessionID: SessionSnapshot] {
        pending.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
    }

    private func stored() {
        let recovered = state.withLock { state -> Bool in
            defer { state.error = nil }
            return state.error != nil
        }
        if recovered { logger.notice("sessions are stored again") }
    }

    private func keep(_ batch: [SessionID: SessionSnapshot], after error: any Error) {
        let first = state.withLock { state -> Bool in
            defer {
                state.error = "\(error)"
                state.failures += 1
            }
            return state.error == nil
        }
        if first {
            logger.error("could not store sessions; keeping them and trying again", metadata: ["error": "\(error)"])
        }
        // A newer snapshot queued meanwhile wins over the one that could not be written.
        pending.withLock { pending in pending.merge(batch) { newer, _ in newer } }
    }
}
