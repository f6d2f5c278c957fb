import Testing

@testable import AudioEngine

@Suite struct TickScheduleTests {
    let ms: UInt64 = 1_000_000

    @Test func deadlinesAreAbsoluteAndDoNotDrift() {
        var schedule = TickSchedule(start: 1_000 * ms)
        // Waking a little late every time must not push later deadlines back.
        for n in 1...10_000 {
            let deadline = schedule.nextDeadline
            #expect(deadline == 1_000 * ms + UInt64(n) * 20 * ms)
            #expect(schedule.advance(now: deadline + 3 * ms) == TickSchedule.Due(run: 1, skipped: 0))
        }
    }

    @Test func aShortStallRunsThePassedTicksSoTheStreamKeepsItsTime() {
        var schedule = TickSchedule(start: 0)
        #expect(schedule.advance(now: 20 * ms) == TickSchedule.Due(run: 1, skipped: 0))
        // The tick due at 40 ms ran at 75 ms: the one of 60 ms runs right after it.
        #expect(schedule.advance(now: 75 * ms) == TickSchedule.Due(run: 2, skipped: 0))
        #expect(schedule.nextDeadline == 80 * ms)
        // Due at 80, run at 139: 100 and 120 run too (as many as catchUpLimit allows).
        #expect(schedule.advance(now: 139 * ms) == TickSchedule.Due(run: 3, skipped: 0))
        #expect(schedule.nextDeadline == 140 * ms)
    }

    @Test func aLongStallRunsOnlyTheLastFewTicksAndSkipsTheRest() {
        var schedule = TickSchedule(start: 0)
        #expect(schedule.advance(now: 20 * ms) == TickSchedule.Due(run: 1, skipped: 0))
        // The tick due at 40 ms ran at 190 ms: of the 7 passed since (60 … 180 ms), 3 run at
        // once and 4 are skipped.
        #expect(TickSchedule.catchUpLimit == 3)
        #expect(schedule.advance(now: 190 * ms) == TickSchedule.Due(run: 4, skipped: 4))
        #expect(schedule.nextDeadline == 200 * ms)
    }

    @Test func overAnHourOfStallsUpToTheLimitNoTickIsLost() {
        var schedule = TickSchedule(start: 0)
        var run: UInt64 = 0
        var skipped: UInt64 = 0
        for n in 0..<180_000 {
            let deadline = schedule.nextDeadline
            // Every 97th wake-up comes 0–79 ms late, the rest 1 ms.
            let late = n % 97 == 0 ? UInt64(n % 80) * ms : 1 * ms
            let due = schedule.advance(now: deadline + late)
            run += due.run
            skipped += due.skipped
        }
        #expect(skipped == 0)
        #expect(run == schedule.tick, "every deadline passed ran its tick")
        #expect(schedule.nextDeadline == (schedule.tick + 1) * 20 * ms)
    }
}
