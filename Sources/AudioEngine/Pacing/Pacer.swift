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

/// Monotonic time and sleeping until an absolute instant; injectable for tests.
protocol PacerClock: Sendable {
    /// Nanoseconds on a monotonic clock.
    func now() -> UInt64
    func sleep(until deadline: UInt64)
}

/// CLOCK_MONOTONIC with `clock_nanosleep(TIMER_ABSTIME)`, so sleeps never accumulate drift.
struct MonotonicClock: PacerClock {
    func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    func sleep(until deadline: UInt64) {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
    }
}

/// The deadline arithmetic of the pacer, kept apart from threads so it can be tested directly.
struct TickSchedule {
    static let interval: UInt64 = 20_000_000
    /// How many deadlines that passed while the pacer was late it still runs, back to back, so a
    /// short stall (a page fault, a lock held by a thread the scheduler set aside) costs the
    /// stream nothing: every frame goes out, and the stream stays on the clock it started on.
    /// Beyond this the passed deadlines are skipped, so a long stall (the process stopped, the
    /// host paused) never arrives as a burst of more than 80 ms of audio.
    static let catchUpLimit: UInt64 = 3
    let start: UInt64
    private(set) var tick: UInt64 = 0

    init(start: UInt64) { self.start = start }

    var nextDeadline: UInt64 { start + (tick + 1) * Self.interval }

    /// What to do at a wake-up: `run` ticks now, one after another (1 when on time), and
    /// `skipped` deadlines that passed and are given up (the stream falls that many ticks behind).
    struct Due: Equatable {
        var run: UInt64
        var skipped: UInt64
    }

    /// Advances past the deadline just slept to, and past every later one `now` is already beyond:
    /// up to `catchUpLimit` of those are run too, the rest skipped.
    mutating func advance(now: UInt64) -> Due {
        tick += 1
        let due = start + tick * Self.interval
        guard now >= due + Self.interval else { return Due(run: 1, skipped: 0) }
        let passed = (now - due) / Self.interval
        tick += passed
        let caughtUp = min(passed, Self.catchUpLimit)
        return Due(run: 1 + caughtUp, skipped: passed - caughtUp)
    }
}

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
