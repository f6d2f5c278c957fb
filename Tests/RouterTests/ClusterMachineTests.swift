// The cluster's decisions for one pair (`ClusterMachine`), without PostgreSQL: what a renewal's
// answer changes, what the pair may take on and play and until when, what its engine's fence
// names, and where sessions and orphans go (docs/cluster.md).
import EngineAPI
import Foundation
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct ClusterMachineTests {
    let settings = ClusterSettings(databaseURL: "", pairID: "me", address: "http://me:8080")
    func id(_ name: String) -> SessionID { (try? SessionID(name)) ?? .engine }
    func pair(_ id: String, sessions: Int = 0, steady: Bool = true) -> ClusterDatabase.Pair {
        ClusterDatabase.Pair(
            id: id, address: "http://\(id):8080", sessions: sessions, maxSessions: 60, load: 0, lateFrames: 0, draining: false,
            steady: steady)
    }

    /// A machine that owns `names`, renewed at `at`.
    func owning(_ names: [String], at: ContinuousClock.Instant) -> ClusterMachine {
        var machine = ClusterMachine(settings: settings)
        let rows = Dictionary(uniqueKeysWithValues: names.map { (id($0), Int64(1)) })
        for (session, epoch) in machine.renewed(rows, sent: at).gained {
            _ = machine.take(session, epoch: epoch, sent: at, now: at)
        }
        return machine
    }

    @Test func aRenewalLosesWhatAnotherPairTookAndGainsWhatWasGiven() {
        let start = ContinuousClock.now
        var machine = owning(["a", "b"], at: start)
        let (lost, gained) = machine.renewed([id("a"): 1, id("c"): 4], sent: start + .milliseconds(375))
        #expect(lost == [id("b")])
        #expect(gained.map(\.0) == [id("c")] && gained.map(\.1) == [4])
        #expect(machine.owned[id("b")] == nil && machine.renewedAt == start + .milliseconds(375))
        // A session taken on after the round was sent is not lost by it.
        var late = owning(["a"], at: start)
        _ = late.take(id("new"), epoch: 1, sent: start + .seconds(1), now: start + .seconds(1))
        #expect(late.renewed([id("a"): 1], sent: start + .milliseconds(500)).lost.isEmpty)
    }

    /// A renewal sent before a session left (handed over, let go) read it as still this pair's:
    /// its answer does not take it back; a later round's, when it was given back, does.
    @Test func aRenewalSentBeforeASessionLeftDoesNotTakeItBack() {
        let start = ContinuousClock.now
        var machine = owning(["a", "b"], at: start)
        let roundSent = start + .milliseconds(100)
        machine.handOver(id("a"), until: start + .seconds(2), at: start + .milliseconds(150))
        _ = machine.remove(id("b"), at: start + .milliseconds(160))
        let late = machine.renewed([id("a"): 1, id("b"): 1], sent: roundSent)
        #expect(late.gained.isEmpty && late.lost.isEmpty)
        let given = machine.renewed([id("a"): 5], sent: start + .milliseconds(500))
        #expect(given.gained.map(\.0) == [id("a")] && given.gained.map(\.1) == [5])
    }

    @Test func thePairPlaysUntilALeaseLessTheMarginAfterItsLastRenewalWasSent() {
        let start = ContinuousClock.now
        var machine = owning(["a", "b"], at: start)
        let bound = start + settings.lease - settings.fenceMargin
        #expect(machine.playsUntil == bound)
        #expect(machine.holds(id("a"), epoch: 1, at: bound - .milliseconds(1)))
        #expect(!machine.holds(id("a"), epoch: 1, at: bound))
        #expect(!machine.holds(id("a"), epoch: 2, at: start), "another epoch is another owner's")
        #expect(machine.fenceExpired(at: bound - .milliseconds(1)).isEmpty)
        #expect(machine.fenceExpired(at: bound) == [id("a"), id("b")])
        #expect(machine.owned.isEmpty && machine.fences == 1)
        #expect(machine.fenceExpired(at: bound + .seconds(1)).isEmpty, "nothing left to stop")
    }

    @Test func aPairThatCannotProveItsLeasesTakesNothingAndADrainingOneGivesItBack() {
        let start = ContinuousClock.now
        var fenced = owning([], at: start)
        let late = start + settings.lease
        #expect(fenced.take(id("x"), epoch: 3, sent: start, now: late) == .refused)
        #expect(fenced.owned.isEmpty)
        var fresh = ClusterMachine(settings: settings)
        // Its first session: the statement that gave it proves the lease.
        #expect(fresh.take(id("x"), epoch: 1, sent: start, now: start) == .owned(isNew: true))
        #expect(fresh.renewedAt == start && fresh.takeovers == 1)
        #expect(fresh.take(id("x"), epoch: 2, sent: start, now: start) == .owned(isNew: false))
        #expect(fresh.owned[id("x")]?.epoch == 2)
        fresh.startDraining()
        #expect(fresh.take(id("y"), epoch: 1, sent: start, now: start) == .release)
    }

    @Test func theEngineFenceNamesWhatThePairOwnsAndHandsOverForAsLongAsItMayPlay() {
        let start = ContinuousClock.now
        var machine = owning(["a", "b"], at: start)
        machine.handOver(id("b"), until: start + .seconds(2), at: start)
        _ = machine.take(id("c"), epoch: 1, sent: start, now: start)
        let first = machine.fence(holder: "r", at: start + .milliseconds(500))
        #expect(first.sessions == [id("a"), id("b"), id("c")])
        #expect(first.validMS == 1_500 && first.holder == "r")
        let later = machine.fence(holder: "r", at: start + .milliseconds(2_500))
        #expect(later.version > first.version)
        #expect(later.sessions == [id("a"), id("c")], "a hand-over past its end is no longer named")
        #expect(later.validMS == 0, "past the bound, nothing may play")
        var never = ClusterMachine(settings: settings)
        #expect(never.fence(holder: "r", at: start).validMS == 0, "never renewed")
    }

    @Test func placementTakesOnlyWhatThePairCanProveAndPrefersSteadyPairs() {
        let start = ContinuousClock.now
        let machine = owning([], at: start)
        let mine = ClusterDatabase.Ownership(owner: "me", epoch: 7, live: true)
        #expect(machine.placing(mine, pairs: [], for: id("g"), at: start) == .local(epoch: 7))
        #expect(
            machine.placing(mine, pairs: [], for: id("g"), at: start + settings.lease)
                == .unavailable("this pair cannot renew its leases at the moment; the session moves within seconds"))
        let theirs = ClusterDatabase.Ownership(owner: "other", epoch: 2, live: true)
        #expect(machine.placing(theirs, pairs: [pair("other")], for: id("g"), at: start) == .remote("http://other:8080"))
        guard case .unavailable = machine.placing(theirs, pairs: [pair("me")], for: id("g"), at: start) else {
            Issue.record("an owner that stopped answering is not a place to send a client")
            return
        }
        // No live owner: the least loaded steady pair; this pair is left out when it cannot prove its leases.
        let pairs = [pair("me", sessions: 5), pair("back", steady: false), pair("other", sessions: 3)]
        #expect(machine.placing(nil, pairs: pairs, for: id("g"), at: start) == .assign(pairs[2]))
        #expect(machine.placing(nil, pairs: [pair("me"), pair("other", sessions: 9)], for: id("g"), at: start) == .assign(pair("me")))
        #expect(
            machine.placing(nil, pairs: [pair("me"), pair("other", sessions: 9)], for: id("g"), at: start + settings.lease)
                == .assign(pair("other", sessions: 9)))
        // Only unsteady pairs left: one of them, rather than none.
        #expect(machine.placing(nil, pairs: [pair("back", steady: false)], for: id("g"), at: start) == .assign(pair("back", steady: false)))
    }

    /// A machine that has renewed every round for a lease up to `until` (it reaches the database).
    func reaching(until: ContinuousClock.Instant) -> ClusterMachine {
        var machine = ClusterMachine(settings: settings)
        var sent = until - settings.lease
        while sent <= until {
            _ = machine.renewed([:], sent: sent)
            sent += settings.renewEvery
        }
        return machine
    }

    @Test func orphansGoToTheBestPairAndOthersWaitThreeRoundsForIt() {
        let start = ContinuousClock.now
        let machine = reaching(until: start)
        let fresh = ClusterDatabase.Orphan(
            id: id("o1"), ownership: .init(owner: "dead", epoch: 1, live: false), expiredFor: .milliseconds(100))
        let old = ClusterDatabase.Orphan(
            id: id("o2"), ownership: .init(owner: "dead", epoch: 1, live: false), expiredFor: .seconds(2))
        // This pair is the best: it takes both, counting the first as load for the second.
        let mine = machine.orphanAssignments([fresh, old], pairs: [pair("me"), pair("other", sessions: 1)], at: start)
        #expect(mine.map(\.to.id) == ["me", "other"])
        // Another pair is the best: a fresh orphan is left to it, one it left three rounds is given.
        let theirs = machine.orphanAssignments([fresh, old], pairs: [pair("me", sessions: 9), pair("other")], at: start)
        #expect(theirs.map(\.orphan.id) == [id("o2")] && theirs.map(\.to.id) == ["other"])
        // A pair whose renewals stopped a lease ago (it cannot prove its leases) places none,
        // not even with another pair: its run of renewals has broken.
        let fenced = machine.orphanAssignments([old], pairs: [pair("me"), pair("other", sessions: 9)], at: start + settings.lease)
        #expect(fenced.isEmpty)
    }

    /// 2026-11-30, every pair cut off for 6 s and mended: one pair's round waited 5.8 s on a
    /// statement sent into the cut, and meanwhile its clients' placements, which got through,
    /// gave its own guilds and a neighbour's to the first pair back. A run of renewals ends when
    /// the next renewal is overdue, not when a late one comes.
    @Test func aPairWhoseRenewalsStoppedPlacesNoOrphanThroughAClientsPlacement() {
        let start = ContinuousClock.now
        let machine = reaching(until: start)
        #expect(machine.hasReachedTheDatabaseForALease(at: start + settings.renewEvery))
        let stalled = start + settings.steadyGap + .milliseconds(1)
        #expect(!machine.hasReachedTheDatabaseForALease(at: stalled))
        let expired = ["me", "cut-off-too"].map { ClusterDatabase.Ownership(owner: $0, epoch: 1, live: false) }
        for ownership in expired {
            guard case .unavailable = machine.placing(ownership, pairs: [pair("first-back")], for: id("g"), at: stalled) else {
                Issue.record("a pair whose renewals stopped placed \(ownership.owner ?? "-")'s session")
                continue
            }
        }
        let orphan = ClusterDatabase.Orphan(id: id("o"), ownership: expired[1], expiredFor: .seconds(20))
        #expect(machine.orphanAssignments([orphan], pairs: [pair("first-back")], at: stalled).isEmpty)
        // A session never stored has no owner to wait for: it goes to a pair that can play it.
        #expect(machine.placing(nil, pairs: [pair("first-back")], for: id("new"), at: stalled) == .assign(pair("first-back")))
    }

    @Test func aPairBackAtTheDatabasePlacesNoOrphanUntilItHasReachedItForALease() {
        let back = ContinuousClock.now
        let orphan = ClusterDatabase.Orphan(
            id: id("o"), ownership: .init(owner: "cut-off-too", epoch: 1, live: false), expiredFor: .seconds(20))
        // Its first round after the outage: the owner may be back at its next one.
        var machine = ClusterMachine(settings: settings)
        _ = machine.renewed([:], sent: back)
        #expect(machine.orphanAssignments([orphan], pairs: [pair("me")], at: back).isEmpty)
        // Renewing every round for a lease, it has seen every pair that is back: the orphan is placed.
        var sent = back
        while sent < back + settings.pairTimeout {
            sent += settings.renewEvery
            _ = machine.renewed([:], sent: sent)
        }
        #expect(machine.orphanAssignments([orphan], pairs: [pair("me")], at: sent).map(\.to.id) == ["me"])
        // A gap longer than `steadyGap` between two renewals starts the wait again.
        let again = sent + settings.steadyGap + .milliseconds(1)
        _ = machine.renewed([:], sent: again)
        #expect(machine.orphanAssignments([orphan], pairs: [pair("me")], at: again + .milliseconds(100)).isEmpty)
        #expect(machine.reachingSince == again)
        // Nor does a client's placement give the orphan away meanwhile (its owner's or this pair's own).
        let expired = ["cut-off-too", "me"].map { ClusterDatabase.Ownership(owner: $0, epoch: 1, live: false) }
        for ownership in expired {
            guard case .unavailable = machine.placing(ownership, pairs: [pair("me")], for: id("o"), at: again + .milliseconds(100)) else {
                Issue.record("a pair just back placed \(ownership.owner ?? "-")'s orphan")
                continue
            }
        }
        sent = again
        while sent < again + settings.pairTimeout {
            sent += settings.renewEvery
            _ = machine.renewed([:], sent: sent)
        }
        for ownership in expired {
            #expect(machine.placing(ownership, pairs: [pair("me")], for: id("o"), at: sent) == .assign(pair("me")))
        }
    }

    @Test func rebalancingGivesNothingToAPairNotYetSteady() throws {
        let now = ContinuousClock.now
        let owned = Dictionary(uniqueKeysWithValues: (0..<8).map { (id("g\($0)"), now - .seconds(60)) })
        let back = pair("back", steady: false)
        #expect(ClusterMachine.rebalancing(owned: owned, pairs: [pair("me", sessions: 8), back], me: "me", now: now) == nil)
        let plan = try #require(ClusterMachine.rebalancing(owned: owned, pairs: [pair("me", sessions: 8), pair("back")], me: "me", now: now))
        #expect(plan.target.id == "back" && plan.count == 4)
    }
}
