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
            #expect(schedule.advance(now: deadline + 3 * ms) == 0)
        }
    }

    @Test func aLongStallSkipsTicksInsteadOfBursting() {
        var schedule = TickSchedule(start: 0)
        #expect(schedule.advance(now: 20 * ms) == 0)
        // The tick due at 40 ms ran at 130 ms: the ticks of 60, 80, 100 and 120 ms are late.
        #expect(schedule.advance(now: 130 * ms) == 4)
        #expect(schedule.nextDeadline == 140 * ms)
    }
}
