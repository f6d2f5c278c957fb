// The pacer's loop on a clock the test owns: every wake-up is a little late, two are very late.
// Deadlines stay on the 20 ms grid of the start; a short stall is made up (the ticks it passed
// run at once, so the stream keeps its time), and of a long one only the last
// `TickSchedule.catchUpLimit` ticks are: the rest are skipped, never burst, and the streaming
// session counts them as the pacer's deficit.
import EngineAPI
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
import WireProtocol

@testable import AudioEngine

/// Virtual monotonic time: each sleep ends `overshoot` after its deadline (plus a one-off stall),
/// and takes a real 2 ms so the decoding threads keep up with the virtual clock.
final class ScriptedPacerClock: PacerClock {
    private struct State {
        var now: UInt64 = 5_000_000_000
        var deadlines: [UInt64] = []
        var stall: UInt64 = 0
    }
    private let state = Mutex(State())
    let start: UInt64 = 5_000_000_000
    let overshoot: UInt64 = 3_000_000

    func now() -> UInt64 { state.withLock { $0.now } }

    func sleep(until deadline: UInt64) {
        Thread.sleep(forTimeInterval: 0.002)
        state.withLock { state in
            state.deadlines.append(deadline)
            state.now = max(state.now, deadline) + overshoot + state.stall
            state.stall = 0
        }
    }

    /// The next sleep ends `nanoseconds` later than it would.
    func stallNextSleep(by nanoseconds: UInt64) { state.withLock { $0.stall = nanoseconds } }
    var deadlines: [UInt64] { state.withLock { $0.deadlines } }
}

@Suite struct PacerTests {
    @Test func deadlinesStayOnTheGridAShortStallIsMadeUpAndALongOneCounted() async throws {
        let driver = try TickDriver()
        // Long enough to be streaming still however slowly this host decodes it.
        _ = try MediaFixture.tone(330, seconds: 20, into: driver.directory.path)
        let id = try SessionID("paced")
        _ = try driver.manager.play(sessionID: id, url: "tone-330.mp3")
        let clock = ScriptedPacerClock()
        let pacer = Pacer(
            manager: driver.manager, sink: AudioSocketServer(path: "/nonexistent/unused.sock", logger: Logger(label: "test")),
            clock: clock, logger: Logger(label: "test"))
        let running = Task { try await pacer.run() }

        func frames() throws -> FrameCounters { try driver.manager.info(sessionID: id).frames }
        #expect(try await eventually(timeout: .seconds(30)) { try frames().sent >= 5 })
        #expect(try frames().deficit == 0)
        // A wake-up 53 ms late passes 2 more deadlines: all three ticks run, nothing is lost.
        clock.stallNextSleep(by: 50_000_000)
        var stalledAt = clock.deadlines.count
        #expect(await eventually(timeout: .seconds(30)) { clock.deadlines.count >= stalledAt + 5 })
        #expect(try frames().deficit == 0, "a short stall is made up")
        // One 133 ms late passes 6: the last 3 run, the 3 before them are the pacer's deficit.
        clock.stallNextSleep(by: 130_000_000)
        stalledAt = clock.deadlines.count
        #expect(await eventually(timeout: .seconds(30)) { clock.deadlines.count >= stalledAt + 5 })
        running.cancel()
        try await running.value
        // A cancelled `run` does not wait for the pacer's thread: let it finish its last sleep.
        var slept = -1
        while slept != clock.deadlines.count {
            slept = clock.deadlines.count
            try await Task.sleep(for: .milliseconds(100))
        }

        let counted = try frames(), state = try driver.manager.info(sessionID: id).state
        #expect(counted.deficit == 3, "\(counted) in state \(state)")
        let ticks = clock.deadlines.map { deadline -> (tick: UInt64, offGrid: UInt64) in
            ((deadline - clock.start) / TickSchedule.interval, (deadline - clock.start) % TickSchedule.interval)
        }
        #expect(ticks.allSatisfy { $0.offGrid == 0 }, "3 ms late every wake-up must not move later deadlines")
        let steps = zip(ticks.dropFirst(), ticks).map { $0.tick - $1.tick }
        #expect(steps.filter { $0 != 1 } == [3, 7], "the next deadline after each stall is on the grid: \(steps)")
        // Every deadline up to the last one slept to ran a tick, but for the 3 skipped; the
        // shutdown runs one more, right after the last.
        let last = try #require(ticks.last).tick
        #expect(
            await eventually(timeout: .seconds(5)) { driver.manager.ticksRun == last + 1 - 3 },
            "\(driver.manager.ticksRun) ticks run, deadlines \(ticks.map(\.tick))")
    }
}
