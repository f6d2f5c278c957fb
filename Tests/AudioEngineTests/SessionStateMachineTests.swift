import EngineAPI
import Testing

@testable import AudioEngine

@Suite struct SessionStateMachineTests {
    /// A machine driven into `state` through allowed transitions.
    static func machine(in state: SessionState, playID: UInt64 = 1) -> SessionStateMachine {
        var machine = SessionStateMachine()
        switch state {
        case .idle: break
        case .extracting: _ = machine.handle(.play(playID: playID))
        case .streaming:
            _ = machine.handle(.play(playID: playID))
            _ = machine.handle(.opened(playID: playID))
        case .paused:
            _ = machine.handle(.play(playID: playID))
            _ = machine.handle(.opened(playID: playID))
            _ = machine.handle(.pause)
        case .stopped:
            _ = machine.handle(.play(playID: playID))
            _ = machine.handle(.stop)
        case .error:
            _ = machine.handle(.play(playID: playID))
            _ = machine.handle(.failed(playID: playID))
        }
        #expect(machine.state == state)
        return machine
    }

    @Test func theDesignedPathPlaysPausesResumesAndFinishes() {
        var m = SessionStateMachine()
        #expect(m.state == .idle)
        #expect(m.handle(.play(playID: 1)) == .start(replacing: nil))
        #expect(m.state == .extracting)
        #expect(m.handle(.opened(playID: 1)) == .emitReady)
        #expect(m.state == .streaming)
        #expect(m.handle(.pause) == .pause)
        #expect(m.state == .paused)
        #expect(m.handle(.seek) == .seek)
        #expect(m.state == .paused)
        #expect(m.handle(.resume) == .resume)
        #expect(m.handle(.seek) == .seek)
        #expect(m.handle(.ended(playID: 1)) == .finish)
        #expect(m.state == .stopped)
    }

    @Test(arguments: [SessionState.extracting, .streaming, .paused])
    func aNewPlayReplacesAnActiveOne(from state: SessionState) {
        var m = Self.machine(in: state, playID: 4)
        #expect(m.handle(.play(playID: 5)) == .start(replacing: 4))
        #expect(m.state == .extracting)
        #expect(m.playID == 5)
    }

    @Test(arguments: [SessionState.idle, .stopped, .error])
    func aNewPlayAfterTheEndReplacesNothing(from state: SessionState) {
        var m = Self.machine(in: state)
        #expect(m.handle(.play(playID: 9)) == .start(replacing: nil))
    }

    @Test(arguments: [SessionState.extracting, .streaming, .paused])
    func stopEndsAnActivePlay(from state: SessionState) {
        var m = Self.machine(in: state, playID: 3)
        #expect(m.handle(.stop) == .stop(playID: 3))
        #expect(m.state == .stopped)
    }

    @Test(arguments: [SessionState.idle, .stopped, .error])
    func stopIsIdempotent(from state: SessionState) {
        var m = Self.machine(in: state)
        #expect(m.handle(.stop) == .none)
        #expect(m.state == state)
    }

    @Test func sourceFailureWhileExtractingOrStreamingIsAnError() {
        for state in [SessionState.extracting, .streaming, .paused] {
            var m = Self.machine(in: state, playID: 2)
            #expect(m.handle(.failed(playID: 2)) == .fail)
            #expect(m.state == .error)
        }
    }

    @Test func refusedTransitionsLeaveTheStateAlone() {
        let refused: [(SessionState, SessionStateMachine.Input)] = [
            (.streaming, .resume), (.paused, .pause), (.extracting, .pause), (.extracting, .resume),
            (.extracting, .seek), (.idle, .pause), (.idle, .resume), (.idle, .seek), (.stopped, .pause),
            (.stopped, .resume), (.stopped, .seek), (.error, .pause), (.error, .resume), (.error, .seek),
        ]
        for (state, input) in refused {
            var m = Self.machine(in: state)
            guard case .refuse(let reason) = m.handle(input) else {
                Issue.record("\(input) in \(state) was not refused")
                continue
            }
            #expect(!reason.isEmpty)
            #expect(m.state == state)
        }
    }

    /// A next play joined while streaming becomes the session's play: its end finishes the
    /// session, the previous play's does not. A join of a play that is not current, or while
    /// paused or stopped, changes nothing.
    @Test func aJoinedPlayTakesOverTheSession() {
        var m = Self.machine(in: .streaming)
        #expect(m.handle(.joined(previous: 1, next: 2)) == .emitReady)
        #expect(m.state == .streaming && m.playID == 2)
        #expect(m.handle(.ended(playID: 1)) == .none)
        #expect(m.handle(.joined(previous: 1, next: 3)) == .none)
        #expect(m.handle(.ended(playID: 2)) == .finish)
        for state in [SessionState.idle, .extracting, .paused, .stopped, .error] {
            var other = Self.machine(in: state)
            #expect(other.handle(.joined(previous: 1, next: 2)) == .none)
            #expect(other.state == state && other.playID != 2)
        }
    }

    @Test func resultsOfAnOlderPlayAreIgnored() {
        var m = Self.machine(in: .streaming, playID: 1)
        _ = m.handle(.play(playID: 2))
        #expect(m.handle(.opened(playID: 1)) == .none)
        #expect(m.handle(.failed(playID: 1)) == .none)
        #expect(m.handle(.ended(playID: 1)) == .none)
        #expect(m.state == .extracting)
        #expect(m.handle(.opened(playID: 2)) == .emitReady)
        #expect(m.handle(.ended(playID: 1)) == .none)
        #expect(m.state == .streaming)
    }

    @Test func idleTimeoutRemovesEndedAndPausedSessionsOnly() {
        var paused = Self.machine(in: .paused, playID: 7)
        #expect(paused.handle(.idleTimeout) == .remove(playID: 7))
        for state in [SessionState.stopped, .error, .idle] {
            var m = Self.machine(in: state)
            #expect(m.handle(.idleTimeout) == .remove(playID: nil))
        }
        for state in [SessionState.extracting, .streaming] {
            var m = Self.machine(in: state)
            #expect(m.handle(.idleTimeout) == .none)
            #expect(m.state == state)
        }
    }
}
