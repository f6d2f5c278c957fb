// Takes snapshots from session controllers without waiting and writes the newest of each in one
// transaction a moment later, so a burst of changes costs one write and nothing on the audio
// path ever waits for the disk. Flushes what is left when the Router stops.
import Logging
import ServiceLifecycle
import Synchronization
import WireProtocol

final class PersistenceWriter: Service, Sendable {
    private let database: SessionDatabase
    private let logger: Logger
    private let delay: Duration
    private let pending = Mutex<[SessionID: SessionSnapshot]>([:])
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>

    init(database: SessionDatabase, logger: Logger, delay: Duration = .milliseconds(200)) {
        self.database = database
        self.logger = logger
        self.delay = delay
        (wakes, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Queues `snapshot` as the newest state of `id`; returns at once.
    func save(_ id: SessionID, _ snapshot: SessionSnapshot) {
        pending.withLock { $0[id] = snapshot }
        wake.yield()
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await _ in self.wakes {
                try? await Task.sleep(for: self.delay)
                if Task.isCancelled { break }
                await self.flush()
            }
        }
        // Also when the service was cancelled rather than shut down gracefully: nothing is lost.
        flushNow()
    }

    /// Writes everything queued so far.
    private func flush() async {
        let batch = takePending()
        guard !batch.isEmpty else { return }
        do {
            try await database.save(batch)
        } catch {
            keep(batch, after: error)
        }
    }

    /// Writes everything queued, on the calling thread (the last write before the Router exits).
    func flushNow() {
        let batch = takePending()
        guard !batch.isEmpty else { return }
        do {
            try database.saveBlocking(batch)
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

    private func keep(_ batch: [SessionID: SessionSnapshot], after error: any Error) {
        logger.error("could not save sessions; keeping them for the next write", metadata: ["error": "\(error)"])
        pending.withLock { pending in pending.merge(batch) { newer, _ in newer } }
    }
}
