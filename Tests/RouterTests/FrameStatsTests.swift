// Lavalink's frameStats from the engine's counters at two readings (FrameStats), without an engine.
import EngineAPI
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct FrameStatsTests {
    let start = ContinuousClock.now
    let a: SessionID, b: SessionID, c: SessionID

    init() throws {
        (a, b, c) = (try SessionID("41771983423143937"), try SessionID("41771983423143938"), try SessionID("41771983423143939"))
    }

    func reading(after seconds: Int, _ frames: [SessionID: FrameCounters]) -> FrameStats.Reading {
        FrameStats.Reading(at: start + .seconds(seconds), frames: frames)
    }

    @Test func averagesThePlayingPlayersAndScalesToAMinute() {
        let before = reading(after: 0, [a: FrameCounters(sent: 100), b: FrameCounters(sent: 50, nulled: 5, deficit: 1), c: FrameCounters(sent: 7)])
        // 30 s later: a sent 1,500; b sent 1,400, had no frame 100 times, missed 2 deadlines;
        // c is not playing, and is not counted.
        let after = reading(after: 30, [
            a: FrameCounters(sent: 1_600), b: FrameCounters(sent: 1_450, nulled: 105, deficit: 3), c: FrameCounters(sent: 7),
        ])
        #expect(FrameStats.perMinute(before: before, after: after, players: [a, b]) == FrameStats(sent: 2_900, nulled: 100, deficit: 2))
        #expect(FrameStats.perMinute(before: before, after: after, players: [a, a]) == FrameStats(sent: 3_000, nulled: 0, deficit: 0))
    }

    @Test func aPlayerNotCountedAtBothReadingsOrWhoseCountersWentBackIsLeftOut() {
        let before = reading(after: 0, [a: FrameCounters(sent: 100), b: FrameCounters(sent: 900)])
        // b's engine session was made again (its counters start over); c began after the first reading.
        let after = reading(after: 60, [a: FrameCounters(sent: 3_100), b: FrameCounters(sent: 10), c: FrameCounters(sent: 40)])
        #expect(FrameStats.perMinute(before: before, after: after, players: [a, b, c]) == FrameStats(sent: 3_000, nulled: 0, deficit: 0))
        #expect(FrameStats.perMinute(before: before, after: after, players: [b, c]) == nil)
        #expect(FrameStats.perMinute(before: before, after: after, players: []) == nil)
    }

    @Test func readingsOutOfOrderGiveNothing() {
        let frames = [a: FrameCounters(sent: 100)]
        #expect(FrameStats.perMinute(before: reading(after: 5, frames), after: reading(after: 5, frames), players: [a]) == nil)
        #expect(FrameStats.perMinute(before: reading(after: 9, frames), after: reading(after: 5, frames), players: [a]) == nil)
    }

    @Test func theStatsIntervalIsAMinuteUnlessSetToAtLeastASecond() throws {
        #expect(try RouterConfiguration(environment: [:]).lavalinkStatsInterval == .seconds(60))
        #expect(try RouterConfiguration(environment: ["TONEARM_LAVALINK_STATS_INTERVAL": "2"]).lavalinkStatsInterval == .seconds(2))
        for bad in ["0.5", "0", "-3", "soon"] {
            #expect(throws: RouterConfigurationError.self, "accepted \(bad)") {
                try RouterConfiguration(environment: ["TONEARM_LAVALINK_STATS_INTERVAL": bad])
            }
        }
    }
}
