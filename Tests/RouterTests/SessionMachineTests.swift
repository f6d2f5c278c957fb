// The session's decisions without an actor, a socket or a clock: inputs in, actions out, each
// step checked. The same races the controller tests replay through the actor, here one input at a
// time (the time is given with each input).
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct SessionMachineTests {
    let id = try! SessionID("guild-1")
    let start = ContinuousClock.now

    /// A short description of each action, to compare whole steps.
    func describe(_ actions: [SessionMachine.Action]) -> [String] {
        actions.map { action in
            switch action {
            case .call(let call):
                switch call.kind {
                case .play(let url, let startMS, _, _, _, _, _, let generation): "play \(url) from \(startMS ?? 0) g\(generation)"
                case .control(let control, _): "control \(control.name)"
                case .next(let ask): "next \(ask.url ?? "none") after \(ask.after)"
                }
            case .resolve(let lookup, let url): "resolve #\(lookup) \(url)"
            case .callOff(let lookup): "call off #\(lookup)"
            case .broadcast(let json): json.contains("\"type\":\"error\"") ? "error" : "state"
            case .persist: "persist"
            case .finish(let request, let outcome):
                switch outcome {
                case .success: "answer \(request)"
                case .failure(let error): "refuse \(request) \(error.code)"
                }
            case .seekRoom(_, let error, let snapshot): "seek room (\(error.code)) at \(snapshot.positionMS)"
            }
        }
    }

    func calls(_ actions: [SessionMachine.Action]) -> [SessionMachine.Call] {
        actions.compactMap { if case .call(let call) = $0 { call } else { nil } }
    }

    func ready(_ playID: UInt64) -> WireEvent {
        WireEvent(type: .ready, sessionID: id, playID: playID, title: "T", durationMS: 30_000, positionMS: 0)
    }

    /// A machine playing `url` as play `playID` (request 1 and lookup 1 used).
    func playing(_ url: String, playID: UInt64) throws -> SessionMachine {
        var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        _ = machine.handle(.command(.play(url: url), request: 1, shuffleSeed: 0), now: start)
        let play = try #require(calls(machine.handle(.resolved(lookup: 1, .success(Resolution(url: url))), now: start)).first)
        _ = machine.handle(.answered(play, .success(playID)), now: start)
        _ = machine.handle(.event(ready(playID)), now: start)
        return machine
    }

    /// A play the engine stopped for its fence is marked for its pair to play on (if it still
    /// holds the session); one the engine stopped for another reason (it restarted) is not; a
    /// resume plays the same track from where it was and clears the mark.
    @Test func aPlayStoppedForTheFenceIsMarkedToPlayOnAndAResumeClearsIt() throws {
        var machine = try playing("tone.mp3", playID: 7)
        _ = machine.handle(.event(WireEvent(type: .progress, sessionID: id, playID: 7, positionMS: 4_000)), now: start + .seconds(4))
        _ = machine.handle(
            .event(WireEvent(type: .finished, sessionID: id, playID: 7, reason: .stopped, code: "fenced")), now: start + .seconds(4))
        #expect(machine.lostToFence)
        let again = try #require(calls(machine.handle(.command(.resume, request: 2, shuffleSeed: 0), now: start + .seconds(5))).first)
        guard case .play(let url, let startMS, _, _, _, _, _, _) = again.kind else { Issue.record("not a play: \(again.kind)"); return }
        #expect(url == "tone.mp3" && startMS == 4_000)
        #expect(!machine.lostToFence)

        var other = try playing("tone.mp3", playID: 8)
        _ = other.handle(.event(WireEvent(type: .finished, sessionID: id, playID: 8, reason: .stopped, code: "engine_restarted")), now: start)
        #expect(!other.lostToFence)
    }

    /// A seek's answer sets the position; a `progress` or `resumed` the engine sent before the
    /// seek and read after its answer does not take it back (a client would see the old
    /// position), until the engine's `seeked` comes or a second has passed.
    @Test func aSeekIsNotUndoneByAnEventSentBeforeIt() throws {
        var machine = try playing("a.mp3", playID: 7)
        let seek = try #require(calls(machine.handle(.command(.seek(positionMS: 5_000), request: 2, shuffleSeed: 0), now: start)).first)
        _ = machine.handle(.answered(seek, .success(nil)), now: start)
        #expect(machine.snapshot.positionMS == 5_000)
        for type in [EventType.progress, .resumed] {
            _ = machine.handle(.event(WireEvent(type: type, sessionID: id, playID: 7, positionMS: 1_000)), now: start + .milliseconds(50))
            #expect(machine.snapshot.positionMS == 5_000, "a \(type) sent before the seek took it back")
        }
        _ = machine.handle(.event(WireEvent(type: .seeked, sessionID: id, playID: 7, positionMS: 5_000)), now: start + .milliseconds(60))
        _ = machine.handle(.event(WireEvent(type: .progress, sessionID: id, playID: 7, positionMS: 5_500)), now: start + .milliseconds(500))
        #expect(machine.snapshot.positionMS == 5_500, "after the engine's seeked, progress counts again")
        // No seeked (a play replaced meanwhile, say): a second later progress counts again.
        let again = try #require(calls(machine.handle(.command(.seek(positionMS: 9_000), request: 3, shuffleSeed: 0), now: start + .seconds(1))).first)
        _ = machine.handle(.answered(again, .success(nil)), now: start + .seconds(1))
        _ = machine.handle(.event(WireEvent(type: .progress, sessionID: id, playID: 7, positionMS: 6_000)), now: start + .milliseconds(1_500))
        #expect(machine.snapshot.positionMS == 9_000)
        _ = machine.handle(.event(WireEvent(type: .progress, sessionID: id, playID: 7, positionMS: 9_900)), now: start + .milliseconds(2_100))
        #expect(machine.snapshot.positionMS == 9_900)
    }

    @Test func aPlayIsResolvedThenStartedAndItsCallerAnsweredWhenTheEngineHasIt() throws {
        var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        #expect(describe(machine.handle(.command(.play(url: "a.mp3"), request: 1, shuffleSeed: 0), now: start)) == ["resolve #1 a.mp3"])
        #expect(machine.view(at: start).resolving == [PendingTrack(url: "a.mp3", command: "play")])
        let resolved = machine.handle(.resolved(lookup: 1, .success(Resolution(url: "a.mp3", title: "A"))), now: start)
        #expect(describe(resolved) == ["state", "persist", "play a.mp3 from 0 g1"])
        let play = try #require(calls(resolved).first)
        // The ready that beats the play's answer waits for it; the answer then settles both.
        #expect(describe(machine.handle(.event(ready(7)), now: start)).isEmpty)
        let answered = machine.handle(.answered(play, .success(7)), now: start)
        #expect(describe(answered) == ["state", "persist", "state", "persist", "answer 1"])
        #expect(machine.view(at: start).status == "playing" && machine.activePlayID == 7)
    }

    @Test func stopCallsOffAPlayStillResolvingAndItsCallerIsToldSuperseded() {
        var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        _ = machine.handle(.command(.play(url: "slow.mp3"), request: 1, shuffleSeed: 0), now: start)
        let stop = machine.handle(.command(.stop, request: 2, shuffleSeed: 0), now: start)
        #expect(describe(stop) == ["call off #1", "refuse 1 superseded", "answer 2"])
        // The engine's late answer for the called-off lookup changes nothing.
        #expect(describe(machine.handle(.resolved(lookup: 1, .success(Resolution(url: "slow.mp3"))), now: start)).isEmpty)
        #expect(machine.isIdle)
    }

    @Test func aCallerAnsweredEarlyHearsTheRefusalWithEveryClient() {
        var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        _ = machine.handle(.command(.enqueue(url: "bad.mp3"), request: 1, shuffleSeed: 0), now: start)
        #expect(describe(machine.handle(.answerEarly(request: 1), now: start)) == ["state", "persist", "answer 1"])
        let refusal = APIError.unprocessable("unresolvable", "nothing there")
        let late = machine.handle(.resolved(lookup: 1, .failure(refusal)), now: start)
        #expect(describe(late) == ["error", "state", "persist"])
        if case .broadcast(let json) = late.first { #expect(json.contains("\"url\":\"bad.mp3\"")) }
        #expect(machine.view(at: start).resolving.isEmpty)
    }

    @Test func anEngineRefusalStopsTheQueueAndRefusesTheCaller() throws {
        var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        _ = machine.handle(.command(.play(url: "gone.mp3"), request: 1, shuffleSeed: 0), now: start)
        let play = try #require(calls(machine.handle(.resolved(lookup: 1, .success(Resolution(url: "gone.mp3"))), now: start)).first)
        let refused = machine.handle(
            .answered(play, .failure(APIError.unprocessable("source_not_found", "no such file"))), now: start)
        #expect(describe(refused).last == "refuse 1 source_not_found")
        #expect(machine.view(at: start).status == "idle")
    }

    /// A cluster's pair whose engine refuses a play as full looks for a pair with room, the
    /// session stopped at that track and position. Found: the caller is answered (it hears the
    /// play start there). Not found: the refusal stands as alone. Other refusals never move it.
    @Test func aPlayRefusedAsFullSeeksAPairWithRoomFirst() throws {
        let full = APIError(status: .serviceUnavailable, code: "engine_full", message: "full")
        for moved in [true, false] {
            var machine = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
            machine.movesForRoom = true
            _ = machine.handle(.command(.play(url: "a.mp3"), request: 1, shuffleSeed: 0), now: start)
            let play = try #require(calls(machine.handle(.resolved(lookup: 1, .success(Resolution(url: "a.mp3"))), now: start)).first)
            let seeking = machine.handle(.answered(play, .failure(full)), now: start + .seconds(2))
            #expect(describe(seeking) == ["seek room (engine_full) at 0"])
            guard case .seekRoom(_, _, let snapshot)? = seeking.first else { continue }
            // What the pair with room is given resumes that track from its start there.
            let (there, resume) = snapshot.movedToAnotherPair()
            #expect(resume && there.queue.currentTrack?.url == "a.mp3" && there.positionMS == 0)
            let answer = machine.handle(.roomSought(play, full, moved: moved), now: start + .seconds(2))
            #expect(describe(answer).last == (moved ? "answer 1" : "refuse 1 engine_full"), "moved: \(moved)")
        }
        var alone = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        _ = alone.handle(.command(.play(url: "a.mp3"), request: 1, shuffleSeed: 0), now: start)
        let play = try #require(calls(alone.handle(.resolved(lookup: 1, .success(Resolution(url: "a.mp3"))), now: start)).first)
        #expect(describe(alone.handle(.answered(play, .failure(full)), now: start)).last == "refuse 1 engine_full")
        var clustered = SessionMachine(id: id, snapshot: SessionSnapshot(), now: start)
        clustered.movesForRoom = true
        _ = clustered.handle(.command(.play(url: "gone.mp3"), request: 1, shuffleSeed: 0), now: start)
        let other = try #require(calls(clustered.handle(.resolved(lookup: 1, .success(Resolution(url: "gone.mp3"))), now: start)).first)
        let missing = APIError.unprocessable("source_not_found", "no such file")
        #expect(describe(clustered.handle(.answered(other, .failure(missing)), now: start)).last == "refuse 1 source_not_found")
    }

    /// The next track is asked for once the play's id is known and it plays; when the engine
    /// joins it (its `ready`), the queue moves on without a play of its own.
    @Test func theNextTrackIsAskedForAndItsJoinMovesTheQueueOn() throws {
        var snapshot = SessionSnapshot()
        _ = snapshot.queue.handle(.enqueue([Track(url: "a.mp3"), Track(url: "b.mp3")], autoplay: false))
        var machine = SessionMachine(id: id, snapshot: snapshot, now: start)
        let jump = machine.handle(.command(.jump(index: 0), request: 1, shuffleSeed: 0), now: start)
        let play = try #require(calls(jump).first)
        #expect(describe(machine.handle(.answered(play, .success(1)), now: start)).last == "answer 1")
        // Its ready: playing, and the track after it is asked for (an engine call: the caller runs it).
        let readied = machine.handle(.event(ready(1)), now: start)
        let ask = try #require(calls(readied).first)
        #expect(describe(readied) == ["state", "persist", "next b.mp3 after 1"])
        #expect(describe(machine.handle(.answered(ask, .success(2)), now: start)).isEmpty)
        // The engine joined play 2: b is current, no play call, and nothing follows it.
        let joined = machine.handle(.event(ready(2)), now: start)
        #expect(describe(joined) == ["state", "persist"])
        #expect(machine.view(at: start).current == 1 && machine.activePlayID == 2)
    }

    @Test func thePositionMovesWithTheClockAtTheTimescalesRate() throws {
        var machine = try playing("a.mp3", playID: 1)
        #expect(machine.position(at: start + .seconds(3)) == 3_000)
        let filters = machine.handle(
            .command(.filters(Filters(timescale: Timescale(speed: 2))), request: 2, shuffleSeed: 0), now: start + .seconds(3))
        let control = try #require(calls(filters).first)
        _ = machine.handle(.answered(control, .success(nil)), now: start + .seconds(3))
        #expect(machine.position(at: start + .seconds(4)) == 5_000, "a second at speed 2 after three at 1")
    }

    /// Following a station stops what the session played and keeps its queue; every command but
    /// follow and unfollow is then refused with `following`; unfollowing lets them through again.
    @Test func aFollowerStopsItsPlayAndRefusesItsOtherCommandsUntilItUnfollows() throws {
        var machine = try playing("a.mp3", playID: 7)
        #expect(machine.view(at: start).status == "playing")

        let station = try SessionID("radio")
        let follow = machine.handle(.command(.follow(station: station), request: 2, shuffleSeed: 0), now: start)
        #expect(describe(follow) == ["state", "persist", "control stop"])
        let stop = try #require(calls(follow).first)
        #expect(describe(machine.handle(.answered(stop, .success(nil)), now: start)).last == "answer 2")
        #expect(machine.view(at: start).following == "radio" && machine.activePlayID == nil)
        #expect(machine.view(at: start).queue.map(\.url) == ["a.mp3"], "the queue stays for when it unfollows")

        for (request, command) in [(3, SessionCommand.resume), (4, .play(url: "b.mp3")), (5, .volume(50)), (6, .next)] as [(UInt64, SessionCommand)] {
            #expect(describe(machine.handle(.command(command, request: request, shuffleSeed: 0), now: start)) == ["refuse \(request) following"])
        }
        #expect(describe(machine.handle(.command(.unfollow, request: 7, shuffleSeed: 0), now: start)) == ["state", "persist", "answer 7"])
        #expect(machine.view(at: start).following == nil)
        #expect(describe(machine.handle(.command(.unfollow, request: 8, shuffleSeed: 0), now: start)) == ["refuse 8 not_following"])
        #expect(describe(machine.handle(.command(.volume(50), request: 9, shuffleSeed: 0), now: start)) == ["state", "persist", "answer 9"])
    }
}
