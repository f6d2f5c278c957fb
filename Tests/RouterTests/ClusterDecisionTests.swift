// The cluster's decisions that are plain values: which pair a session goes to, how a taken-over
// session's position moves on, what a new owner resumes, and the mark a play lost with its
// engine leaves. (The leases, the fence and the relays run against a real PostgreSQL in
// ClusterEndToEndTests.)
import EngineAPI
import Foundation
import ServiceSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct ClusterDecisionTests {
    func pair(_ id: String, sessions: Int = 0, max: Int = 60, load: Double = 0, late: Int = 0, draining: Bool = false)
        -> ClusterDatabase.Pair
    {
        ClusterDatabase.Pair(
            id: id, address: "http://\(id):8080", sessions: sessions, maxSessions: max, load: load, lateFrames: late,
            draining: draining)
    }

    @Test func theLeastLoadedPairWinsAndFullOrDrainingPairsGetNothing() {
        let pairs = [pair("a", sessions: 5), pair("b", sessions: 2), pair("c", sessions: 1, draining: true), pair("d", sessions: 3, max: 3)]
        #expect(LoadScore.best(of: pairs, for: "guild")?.id == "b")
        #expect(LoadScore.best(of: [pair("full", sessions: 3, max: 3), pair("gone", draining: true)], for: "guild") == nil)
        // A busy host costs more than a few sessions: Lavalink's CPU penalty shape.
        #expect(LoadScore.best(of: [pair("idle", sessions: 10), pair("busy", sessions: 0, load: 0.9)], for: "guild")?.id == "idle")
        #expect(LoadScore.score(pair("x")) == 0)
    }

    /// A pair whose engine refuses new plays (`engine_full`) is passed over while another takes
    /// them, however few sessions it holds; when every engine is full, the least loaded still gets it.
    @Test func aPairWhoseEngineIsFullGetsSessionsOnlyWhenEveryOneIs() {
        var full = pair("full", sessions: 1)
        full.admitting = false
        #expect(LoadScore.best(of: [full, pair("busy", sessions: 40, late: 90)], for: "guild")?.id == "busy")
        var alsoFull = pair("also-full", sessions: 40)
        alsoFull.admitting = false
        #expect(LoadScore.best(of: [full, alsoFull], for: "guild")?.id == "full")
    }

    /// A play this pair's engine refused as full goes to the least loaded other pair whose engine
    /// takes plays and whose heartbeats are steady; to none when no such pair is left (the
    /// refusal stands), never back to this pair.
    @Test func aPlayRefusedAsFullGoesOnlyToAPairWithRoom() throws {
        let id = try SessionID("guild")
        var me = pair("me")
        me.admitting = false
        var full = pair("full")
        full.admitting = false
        var unsteady = pair("unsteady")
        unsteady.steady = false
        let others = [full, unsteady, pair("draining", draining: true), pair("capped", sessions: 3, max: 3)]
        #expect(ClusterMachine.room(for: id, among: [me] + others, me: "me") == nil)
        #expect(ClusterMachine.room(for: id, among: [me] + others + [pair("busy", sessions: 9), pair("roomy", sessions: 2)], me: "me")?.id == "roomy")
        // This pair, although its report still says it admits (the report is a round old).
        #expect(ClusterMachine.room(for: id, among: [pair("me")], me: "me") == nil)
    }

    /// A pair that came back (or joined) gets half the difference from a pair with more, a few at
    /// a time, never sessions just taken over, never past its room; a difference of one moves
    /// nothing (it would only bounce back).
    @Test func rebalancingMovesHalfTheDifferenceOfSettledSessionsToTheLeastLoadedPair() throws {
        let now = ContinuousClock.now
        let old = now - .seconds(60)
        let ids = try (0..<7).map { try SessionID("guild-\($0)") }
        let owned = Dictionary(uniqueKeysWithValues: ids.map { ($0, old) })
        let pairs = [pair("me", sessions: 7), pair("back", sessions: 1), pair("other", sessions: 4)]
        let plan = try #require(ClusterMember.rebalancing(owned: owned, pairs: pairs, me: "me", now: now))
        #expect(plan.target.id == "back" && plan.count == 3 && plan.candidates == ids)

        // Four at most per step.
        let many = try Dictionary(uniqueKeysWithValues: (0..<20).map { (try SessionID("g\($0)"), old) })
        #expect(ClusterMember.rebalancing(owned: many, pairs: [pair("me", sessions: 20), pair("empty")], me: "me", now: now)?.count == 4)
        // One apart: nothing.
        #expect(ClusterMember.rebalancing(owned: owned, pairs: [pair("me", sessions: 7), pair("b", sessions: 6)], me: "me", now: now) == nil)
        // Sessions taken over in the last 10 s stay.
        var recent = owned
        for id in ids.prefix(6) { recent[id] = now - .seconds(2) }
        #expect(ClusterMember.rebalancing(owned: recent, pairs: pairs, me: "me", now: now)?.candidates == [ids[6]])
        // A draining or full pair gets nothing.
        #expect(
            ClusterMember.rebalancing(
                owned: owned, pairs: [pair("me", sessions: 7), pair("d", draining: true), pair("f", sessions: 2, max: 2)], me: "me",
                now: now) == nil)
        #expect(
            ClusterMember.rebalancing(owned: owned, pairs: [pair("me", sessions: 7), pair("small", sessions: 0, max: 2)], me: "me", now: now)?
                .count == 2)
    }

    /// Equal scores (pairs start empty) spread sessions over the tied pairs, and every pair
    /// picks the same one for a session.
    @Test func tiesSpreadOverThePairsTheSameWayEverywhere() {
        let pairs = [pair("pair-0"), pair("pair-1"), pair("pair-2")]
        var chosen: [String: Int] = [:]
        for guild in 0..<300 {
            let best = LoadScore.best(of: pairs, for: "guild-\(guild)")?.id ?? ""
            chosen[best, default: 0] += 1
            #expect(LoadScore.best(of: pairs.reversed(), for: "guild-\(guild)")?.id == best)
        }
        #expect(chosen.count == 3 && chosen.values.allSatisfy { $0 > 60 }, "\(chosen)")
    }

    func playing(at positionMS: Int64, durationMS: Int64? = 10_000) -> SessionSnapshot {
        var snapshot = SessionSnapshot()
        _ = snapshot.queue.handle(.playNow(Track(url: "a.mp3", durationMS: durationMS)))
        _ = snapshot.queue.handle(.ready(generation: snapshot.queue.generation))
        snapshot.positionMS = positionMS
        snapshot.playID = 4
        return snapshot
    }

    @Test func aTakenOverSessionMovesOnByWhatItPlayedAfterItsCheckpoint() {
        var snapshot = playing(at: 2_000)
        snapshot.advance(byPlaying: 700)
        #expect(snapshot.positionMS == 2_700)
        snapshot.advance(byPlaying: 60_000)
        #expect(snapshot.positionMS == 10_000, "never past the track's end")
        var fast = playing(at: 1_000)
        fast.filters = Filters(timescale: Timescale(speed: 2))
        fast.advance(byPlaying: 500)
        #expect(fast.positionMS == 2_000, "a timescale moves the track at its rate")
        var paused = playing(at: 1_000)
        _ = paused.queue.handle(.pause)
        _ = paused.queue.handle(.paused(generation: paused.queue.generation))
        paused.advance(byPlaying: 5_000)
        #expect(paused.positionMS == 1_000, "a paused session stood still")
    }

    @Test func aNewOwnerResumesWhatPlayedAndLeavesWhatWasPausedOrStopped() {
        let (moved, resume) = playing(at: 3_000).movedToAnotherPair()
        #expect(resume && moved.queue.status == .idle && moved.playID == nil && moved.positionMS == 3_000)
        #expect(moved.queue.current == 0, "at the same track, for resume to play it from the position")

        var paused = playing(at: 3_000)
        _ = paused.queue.handle(.pause)
        _ = paused.queue.handle(.paused(generation: paused.queue.generation))
        #expect(paused.isActive)
        #expect(!paused.movedToAnotherPair().resume)

        var interrupted = playing(at: 3_000)
        _ = interrupted.queue.handle(.finished(generation: interrupted.queue.generation, reason: .other))
        #expect(!interrupted.isActive && !interrupted.movedToAnotherPair().resume)
        interrupted.interrupted = true
        #expect(interrupted.isActive && interrupted.movedToAnotherPair().resume)
        #expect(!interrupted.movedToAnotherPair().0.interrupted)
    }

    /// A play that ended with its engine marks the session interrupted (stored, so a pair that
    /// takes it over plays it on); a user's stop does not, and clears the mark.
    @Test func aPlayLostWithItsEngineIsMarkedAndAStopClearsIt() throws {
        let id = try SessionID("guild-1")
        let start = ContinuousClock.now
        var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        _ = machine.handle(.command(.play(url: "a.mp3"), request: 1, shuffleSeed: 0), now: start)
        let resolved = machine.handle(.resolved(lookup: 1, .success(Resolution(url: "a.mp3"))), now: start)
        let play = try #require(resolved.compactMap { if case .call(let call) = $0 { call } else { nil } }.first)
        _ = machine.handle(.answered(play, .success(7)), now: start)
        _ = machine.handle(.event(WireEvent(type: .ready, sessionID: id, playID: 7, positionMS: 0)), now: start)
        let ended = machine.handle(
            .event(WireEvent(type: .finished, sessionID: id, playID: 7, reason: .stopped, code: "engine_stopping")),
            now: start + .seconds(2))
        let stored = ended.compactMap { if case .persist(let snapshot) = $0 { snapshot } else { nil } }.last
        #expect(stored?.interrupted == true && stored?.queue.status == .idle && stored?.positionMS == 2_000)
        _ = machine.handle(.command(.stop, request: 2, shuffleSeed: 0), now: start + .seconds(3))
        #expect(!machine.snapshot.interrupted)
    }

    @Test func aSnapshotStoredBeforeTheMarkLoadsWithout() throws {
        let json = #"{"queue":{"tracks":[],"loop":"off","generation":0,"failuresInARow":0,"playback":{"idle":{}}},"volume":100,"position_ms":0}"#
        let snapshot = try JSONDecoder().decode(SessionSnapshot.self, from: Data(json.utf8))
        #expect(!snapshot.interrupted)
        let again = try JSONDecoder().decode(SessionSnapshot.self, from: try JSONEncoder().encode(snapshot))
        #expect(again == snapshot)
    }

    @Test func aSessionsOwnRoutesAreRecognisedForForwarding() throws {
        #expect(try ClusterForwarding.session(in: "/api/sessions/guild-1/play")?.description == "guild-1")
        #expect(try ClusterForwarding.session(in: "/api/sessions/guild-1")?.description == "guild-1")
        #expect(try ClusterForwarding.session(in: "/listen/guild-1.ogg")?.description == "guild-1")
        #expect(try ClusterForwarding.session(in: "/api/sessions") == nil)
        #expect(try ClusterForwarding.session(in: "/api/identity") == nil)
        #expect(try ClusterForwarding.session(in: "/health/session/x") == nil)
        #expect(throws: APIError.self) { try ClusterForwarding.session(in: "/api/sessions/%zz/play") }
    }
}
