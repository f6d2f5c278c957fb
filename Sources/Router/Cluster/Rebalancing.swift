// How many sessions a pair moves to another while both play on, and to which: the move that most
// lowers the higher of the two pairs' load scores (LoadScore), judged by the scores both would
// have after it. A pair's load is taken to scale with its sessions: its load over its sessions is
// what one of them costs there (on a target with none, what one costs here, or its idle load if
// that is more). So a slow
// host with as many sessions as a fast one gives it some, and a pair with more sessions than
// another gives none to it when that one's are dearer (a slower host, heavier sessions).
//
// Loads are a second's CPU against the budget, reported every 10 s: noisy and late. A move must
// lower the higher score by more than a tenth of that pair's load could account for, and for
// `cooldown` after a move a pair moves no more than the session counts alone would, while the
// loads do not show the move yet. With every load near 0 it is the count rule: a pair with at
// least 2 more sessions gives half the difference.
import Foundation
import WireProtocol

enum Rebalancing {
    /// A move lowers the higher of the two scores by at least this much.
    static let margin = 0.5
    /// The most sessions one step moves.
    static let batch = 4
    /// Sessions taken in the last `settle` stay, so a session does not bounce between pairs.
    static let settle: Duration = .seconds(10)
    /// After a move, its loads may not show it yet (each engine reports every 10 s).
    static let cooldown: Duration = .seconds(12)
    /// How far a reported load may be off, as a share of itself.
    static let loadUncertainty = 0.1

    struct Plan: Sendable, Equatable {
        /// How many sessions to move now.
        var count: Int
        /// Those that may go (not taken lately), in a fixed order; the ones not being heard are
        /// passed over by the runner.
        var candidates: [SessionID]
        var target: ClusterDatabase.Pair
    }

    /// One pair's side of a move: its sessions, load and late frames, and the score they give.
    struct Side: Equatable {
        var sessions: Int
        var load: Double
        var lateFrames: Double

        var score: Double { LoadScore.score(sessions: Double(sessions), load: load, lateFrames: lateFrames) }

        /// This side with `count` more sessions (fewer when negative), each costing `each` of
        /// the load; the late frames go with the sessions that leave.
        func with(_ count: Int, each: Double) -> Side {
            let kept = sessions + count
            let late = count < 0 && sessions > 0 ? lateFrames * Double(max(kept, 0)) / Double(sessions) : lateFrames
            return Side(sessions: kept, load: max(load + Double(count) * each, 0), lateFrames: late)
        }
    }

    /// What this pair (`me`, owning `owned`, each since when) moves now; nil: nothing. Only a
    /// steady pair whose engine takes plays, not draining and below its cap, is given any.
    static func plan(
        owned: [SessionID: ContinuousClock.Instant], pairs: [ClusterDatabase.Pair], me: String, now: ContinuousClock.Instant,
        lastMove: ContinuousClock.Instant? = nil
    ) -> Plan? {
        let settled = owned.filter { now - $0.value >= settle }.map(\.key).sorted { $0.description < $1.description }
        guard !settled.isEmpty else { return nil }
        let mine = pairs.first { $0.id == me }
        let here = Side(sessions: owned.count, load: mine?.load ?? 0, lateFrames: Double(mine?.lateFrames ?? 0))
        let cost = here.load / Double(here.sessions)
        let cooling = lastMove.map { now - $0 < cooldown } ?? false
        let others = pairs.filter { $0.id != me && !$0.draining && $0.admitting && $0.steady && $0.sessions < $0.maxSessions }
        var best: (plan: Plan, peak: Double)?
        for other in others.sorted(by: { $0.id < $1.id }) {
            let there = Side(sessions: other.sessions, load: other.load, lateFrames: Double(other.lateFrames))
            // A pair with no sessions: what one costs here, or its idle load if that is more (a
            // slow host, or a small budget, that gave every session away is not given them back).
            let theirCost = there.sessions > 0 ? there.load / Double(there.sessions) : max(cost, there.load)
            let before = max(here.score, there.score)
            let busier = max(here.load, there.load)
            let doubt = LoadScore.cpuPenalty(busier * (1 + loadUncertainty)) - LoadScore.cpuPenalty(busier)
            var limit = min(batch, other.maxSessions - other.sessions, settled.count)
            if cooling { limit = min(limit, (here.sessions - there.sessions) / 2) }
            guard limit >= 1 else { continue }
            for count in 1...limit {
                let peak = max(here.with(-count, each: cost).score, there.with(count, each: theirCost).score)
                guard before - peak >= max(margin, doubt), peak < best?.peak ?? .infinity else { continue }
                best = (Plan(count: count, candidates: settled, target: other), peak)
            }
        }
        return best?.plan
    }
}
