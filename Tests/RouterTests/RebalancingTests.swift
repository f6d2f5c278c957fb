// Rebalancing by cost: sessions move to where the load scores of both pairs come out lowest, not
// where there are fewer sessions; noise in a load does not move anything, and a move the loads do
// not show yet is not repeated on their say. (The count rule with idle loads is checked in
// ClusterDecisionTests and ClusterMachineTests.)
import Foundation
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct RebalancingTests {
    let now = ContinuousClock.now

    func pair(_ id: String, sessions: Int, load: Double, admitting: Bool = true) -> ClusterDatabase.Pair {
        ClusterDatabase.Pair(
            id: id, address: "http://\(id):8080", sessions: sessions, maxSessions: 60, load: load, lateFrames: 0, draining: false,
            admitting: admitting)
    }

    func owned(_ count: Int) throws -> [SessionID: ContinuousClock.Instant] {
        try Dictionary(uniqueKeysWithValues: (0..<count).map { (try SessionID("guild-\($0)"), now - .seconds(60)) })
    }

    func plan(_ me: ClusterDatabase.Pair, _ others: ClusterDatabase.Pair..., lastMove: ContinuousClock.Instant? = nil) throws
        -> Rebalancing.Plan?
    {
        Rebalancing.plan(owned: try owned(me.sessions), pairs: [me] + others, me: me.id, now: now, lastMove: lastMove)
    }

    /// A slow host with as many sessions as a fast one gives it some: 10 at 90 % of its budget
    /// against 10 at 30 % moves four (a step's most); with the scores after it, the slow host
    /// would be at 54 % and the fast one at 42 %.
    @Test func aBusyHostGivesSessionsToAQuietOneWithAsMany() throws {
        let move = try #require(try plan(pair("slow", sessions: 10, load: 0.9), pair("fast", sessions: 10, load: 0.3)))
        #expect(move.target.id == "fast" && move.count == 4)
        // Then, both near the middle (one more would be within the loads' noise), nothing moves
        // either way: the fast host's sessions are cheaper, so its more sessions are no reason.
        #expect(try plan(pair("slow", sessions: 6, load: 0.54), pair("fast", sessions: 14, load: 0.42)) == nil)
        #expect(try plan(pair("fast", sessions: 14, load: 0.42), pair("slow", sessions: 6, load: 0.54)) == nil)
        #expect(try plan(pair("slow", sessions: 5, load: 0.45), pair("fast", sessions: 15, load: 0.45)) == nil)
        #expect(try plan(pair("fast", sessions: 15, load: 0.45), pair("slow", sessions: 5, load: 0.45)) == nil)
    }

    /// A pair with more sessions gives none to one whose fewer sessions cost more, and that one
    /// gives it some instead.
    @Test func moreSessionsAreNotGivenToAPairWhoseFewerCostMore() throws {
        #expect(try plan(pair("many", sessions: 10, load: 0.2), pair("dear", sessions: 5, load: 0.4)) == nil)
        let move = try #require(try plan(pair("dear", sessions: 5, load: 0.4), pair("many", sessions: 10, load: 0.2)))
        #expect(move.target.id == "many" && move.count == 2)
    }

    /// Two loads a tenth apart around the middle, with as many sessions each, are noise: a
    /// second's CPU. Nothing moves.
    @Test func loadsWithinTheirNoiseMoveNothing() throws {
        #expect(try plan(pair("a", sessions: 10, load: 0.55), pair("b", sessions: 10, load: 0.45)) == nil)
        #expect(try plan(pair("a", sessions: 10, load: 0.033), pair("b", sessions: 10, load: 0.027)) == nil)
    }

    /// With small loads it is the count rule: 6 against 4 moves one, 5 against 4 none.
    @Test func withSmallLoadsTheCountsDecide() throws {
        #expect(try plan(pair("a", sessions: 6, load: 0.06), pair("b", sessions: 4, load: 0.04))?.count == 1)
        #expect(try plan(pair("a", sessions: 5, load: 0.05), pair("b", sessions: 4, load: 0.04)) == nil)
    }

    /// Just after a move the loads may not show it (the target's still says idle): the pair then
    /// moves no more than the counts alone would, and as many as the loads ask once they can.
    @Test func justAfterAMoveNoMoreThanTheCountsWouldMove() throws {
        let me = pair("me", sessions: 12, load: 0.8)
        let target = pair("target", sessions: 8, load: 0)
        #expect(try plan(me, target)?.count == 4)
        #expect(try plan(me, target, lastMove: now - .seconds(3))?.count == 2)
        #expect(try plan(me, target, lastMove: now - .seconds(13))?.count == 4)
        let even = try plan(pair("me", sessions: 10, load: 0.8), pair("target", sessions: 10, load: 0), lastMove: now - .seconds(3))
        #expect(even == nil)
    }

    /// A pair that gave every session away because they cost much there (a small budget: its
    /// idle engine alone is 7 % of it) is not given them back by the count rule; an idle pair
    /// whose engine costs little is.
    @Test func aPairThatGaveEverySessionAwayForTheirCostIsNotGivenThemBack() throws {
        let gave = try #require(try plan(pair("small", sessions: 2, load: 0.5), pair("big", sessions: 2, load: 0.02)))
        #expect(gave.target.id == "big" && gave.count == 2)
        #expect(try plan(pair("big", sessions: 4, load: 0.04), pair("small", sessions: 0, load: 0.07)) == nil)
        #expect(try plan(pair("big", sessions: 4, load: 0.04), pair("idle", sessions: 0, load: 0.005))?.count == 2)
    }

    /// A pair whose engine refuses plays (`engine_full`) is given none, however idle it says it is.
    @Test func aPairWhoseEngineIsFullIsGivenNone() throws {
        #expect(try plan(pair("me", sessions: 12, load: 0.8), pair("full", sessions: 0, load: 0, admitting: false)) == nil)
    }
}
