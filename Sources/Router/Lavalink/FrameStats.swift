// Lavalink's `frameStats` (the `stats` op): per playing player, over the last minute, the frames
// Tonearm's engine sent at their deadline, the deadlines at which it had no frame ready (nulled),
// and the deadlines it missed itself (deficit). Read from the engine's own counters per session
// (`GET /sessions`, `frames`) at two moments; a value, tested without an engine.
import EngineAPI
import WireProtocol

struct FrameStats: Equatable, Sendable {
    var sent: Int64
    var nulled: Int64
    var deficit: Int64

    /// The engine's counters of every session at one moment.
    struct Reading: Sendable {
        var at: ContinuousClock.Instant
        var frames: [SessionID: FrameCounters]
    }

    /// The average over `players` of what each one's session counted between `before` and
    /// `after`, scaled to a minute. A player is left out when it was not counted at both readings,
    /// or its counters went back (its engine session was made again between them). nil when no
    /// player is left (Lavalink's `frameStats` is then null), or the readings are not in order.
    static func perMinute(before: Reading, after: Reading, players: [SessionID]) -> FrameStats? {
        let elapsed = after.at - before.at
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
        guard seconds > 0 else { return nil }
        var total = FrameCounters()
        var counted = 0
        for id in Set(players) {
            guard let start = before.frames[id], let end = after.frames[id], end.sent >= start.sent,
                end.nulled >= start.nulled, end.deficit >= start.deficit
            else { continue }
            total.add(FrameCounters(sent: end.sent - start.sent, nulled: end.nulled - start.nulled, deficit: end.deficit - start.deficit))
            counted += 1
        }
        guard counted > 0 else { return nil }
        func average(_ count: UInt64) -> Int64 { Int64((Double(count) * 60 / seconds / Double(counted)).rounded()) }
        return FrameStats(sent: average(total.sent), nulled: average(total.nulled), deficit: average(total.deficit))
    }

    var json: [String: any Sendable] { ["sent": sent, "nulled": nulled, "deficit": deficit] }
}
