// The pacer's deadlines as a value: ticks on an absolute grid (start + n × 20 ms), and what a late
// wake-up runs (up to `catchUpLimit` ticks at once) or gives up (counted as deficit).

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
