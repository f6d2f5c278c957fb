// The one clock of the engine: a dedicated thread that wakes at absolute deadlines
// (`start + n × 20 ms`), collects one frame per streaming session and writes the tick's batch.
// A wake-up that comes a tick or more late runs the ticks it passed at once (up to a limit), so
// the streams keep the clock's time.
import Foundation
#if canImport(CDispatch)
    import CDispatch  // where `timespec` comes from when Foundation is imported, with MemberImportVisibility
#endif
import Glibc
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// Runs the tick loop on its own thread while the service runs.
final class Pacer: Service, Sendable {
    private let manager: SessionManager
    private let sink: AudioSocketServer
    private let clock: any PacerClock
    private let logger: Logger
    private let realtimePriority: Int32?
    private let running = Atomic<Bool>(false)

    init(
        manager: SessionManager, sink: AudioSocketServer, clock: any PacerClock = MonotonicClock(),
        realtimePriority: Int32? = nil, logger: Logger
    ) {
        self.manager = manager
        self.sink = sink
        self.clock = clock
        self.realtimePriority = realtimePriority
        self.logger = logger
    }

    func run() async throws {
        running.store(true, ordering: .relaxed)
        let finished = AsyncStream<Void>.makeStream()
        let thread = Thread { [self] in
            loop()
            finished.continuation.finish()
        }
        thread.name = "tonearm-pacer"
        thread.qualityOfService = .userInteractive
        thread.start()
        try? await gracefulShutdown()
        // Emit every session's `finished` through the clock, so the wire order holds to the end.
        manager.stopAll()
        running.store(false, ordering: .relaxed)
        for await _ in finished.stream {}
    }

    private func loop() {
        // Real-time where allowed; where not, the workers' nice value still lets the pacer in
        // first. Logged either way, so an operator can see which it is.
        ThreadPriority.prioritize("tonearm-pacer", priority: realtimePriority, logger: logger)
        var schedule = TickSchedule(start: clock.now())
        var capacity = TickBatch.minimumCapacity
        while running.load(ordering: .relaxed) {
            clock.sleep(until: schedule.nextDeadline)
            let due = schedule.advance(now: clock.now())
            capacity = tick(lateTicks: due.skipped, capacity: capacity)
            if due.run > 1 { manager.countCaughtUp(ticks: due.run - 1) }
            for _ in 1..<due.run { capacity = tick(lateTicks: 0, capacity: capacity) }
        }
        // One last tick writes the `finished` events of the shutdown.
        _ = tick(lateTicks: 0, capacity: capacity)
    }

    /// One tick into a buffer sized like the last one (so thousands of sessions do not regrow
    /// it from 4 KiB every 20 ms); returns the size for the next.
    private func tick(lateTicks: UInt64, capacity: Int) -> Int {
        var batch = TickBatch(capacity: capacity)
        manager.collectTick(into: &batch, lateTicks: lateTicks)
        if !batch.isEmpty { sink.write(batch) }
        return max(TickBatch.minimumCapacity, batch.all.readableBytes + batch.all.readableBytes / 8)
    }
}
