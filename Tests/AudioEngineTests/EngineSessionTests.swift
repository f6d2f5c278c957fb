// A session's decisions step by step, on the value alone: no manager, pacer thread, worker or
// FFmpeg. Each test puts what a play's worker would leave in its outbox and reads the events
// and counts one tick makes of it.
import EngineAPI
import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import ServiceSupport
import Testing
import WireProtocol

@testable import AudioEngine

@Suite struct EngineSessionTests {
    let id: SessionID
    let info = MediaInfo(title: "Tone", durationMS: 10_000, codec: "mp3", sampleRate: 44_100, channels: 2, isOpusStereo48k: false)

    init() throws { id = try SessionID("s1") }

    func play(_ playID: UInt64, url: String = "tone.mp3") -> Playback {
        Playback(sessionID: id, playID: playID, url: url, startMS: 0, volume: 100, source: nil)
    }

    func leave(_ items: [OutboxItem], in playback: Playback) {
        playback.machine.withLockedValue { machine in
            for item in items {
                let frames = if case .frame = item { 1 } else { 0 }
                machine.push(item, frames: frames, generation: nil)
            }
        }
    }

    func frame(_ byte: UInt8, micros: Int = 20_000) -> OutboxItem {
        .frame([byte], passthrough: false, sourceMicros: micros, rendered: nil)
    }

    /// One tick of the session: what it wrote, in order ("ready 1", "audio 7", "finished 1 stopped").
    func tick(
        _ session: inout EngineSession, late: UInt64 = 0, progressInterval: UInt64 = 50, wallMS: Int64 = 0, stuckTicks: UInt64 = .max
    ) throws -> (written: [String], tick: SessionTick) {
        var batch = TickBatch()
        let tick = session.tick(
            id, into: &batch, lateTicks: late, progressInterval: progressInterval, wallMS: wallMS, stuckTicks: stuckTicks)
        var written: [String] = []
        let processor = NIOSingleStepByteToMessageProcessor(WireMessageDecoder())
        try processor.process(buffer: batch.all) { message in
            switch message {
            case .audio(let packet): written.append("audio \(packet.payload.getInteger(at: packet.payload.readerIndex, as: UInt8.self) ?? 0)")
            case .event(let event, _):
                written.append(
                    ["\(event.type.rawValue)", event.playID.map(String.init), event.reason?.rawValue, event.positionMS.map { "at \($0)" }]
                        .compactMap { $0 }.joined(separator: " "))
            }
        }
        return (written, tick)
    }

    func started(_ playback: Playback, at startMS: Int64 = 0) -> EngineSession {
        var session = EngineSession(normalize: false)
        _ = session.start(playback, id, url: playback.url, startMS: startMS, metadata: nil)
        return session
    }

    @Test func readyGoesOutBeforeTheFirstFrameInTheSameTick() throws {
        let playback = play(1)
        var session = started(playback, at: 1_000)
        leave([.opened(info, passthrough: false), frame(7)], in: playback)
        let (written, tick) = try tick(&session)
        #expect(written == ["ready 1 at 1000", "audio 7"])
        #expect(tick.counted.sent == 1 && tick.counted.nulled == 0)
        #expect(session.machine.state == .streaming)
        #expect(session.title == "Tone" && session.durationMS == 10_000)
        #expect(session.positionMS == 1_020)
    }

    @Test func anEmptyDeadlineIsLateOnlyOnceThePlayHasBeenHeard() throws {
        let playback = play(1)
        var session = started(playback)
        #expect(try tick(&session, late: 3).tick.counted == FrameCounters(), "still opening: start-up, not lateness")
        leave([.opened(info, passthrough: false)], in: playback)
        #expect(try tick(&session, late: 3).tick.counted == FrameCounters(), "ready, but nothing heard yet")
        leave([frame(1)], in: playback)
        _ = try tick(&session)
        let empty = try tick(&session, late: 2).tick.counted
        #expect(empty.nulled == 1 && empty.deficit == 2 && empty.sent == 0)
        #expect(session.counters.nulled == 1 && session.counters.sent == 1)
        _ = session.seek(toMS: 500)
        #expect(try tick(&session, late: 2).tick.counted == FrameCounters(), "a seek's wait is its latency")
    }

    @Test func aPlayAskedToEndEndsFinishedAtThatPosition() throws {
        let playback = play(1)
        var session = started(playback)
        leave([.opened(info, passthrough: false), frame(1), frame(2), frame(3)], in: playback)
        session.endAtMS = 40
        #expect(try tick(&session).written == ["ready 1 at 0", "audio 1"])
        let (written, tick) = try tick(&session)
        #expect(written == ["audio 2", "finished 1 finished"], "its end comes with the frame that reaches it")
        #expect(tick.ended != nil && session.playback == nil && session.machine.state != .streaming)
        // A new play has no end set.
        let next = play(2)
        _ = session.start(next, id, url: "tone.mp3", startMS: 0, metadata: nil)
        #expect(session.endAtMS == nil)
    }

    @Test func aPlayWithoutFramesForTheThresholdIsStuckOncePerStall() throws {
        let playback = play(1)
        var session = started(playback)
        leave([.opened(info, passthrough: false), frame(1)], in: playback)
        _ = try tick(&session, stuckTicks: 3)
        var written: [String] = []
        for _ in 1...6 { written += try tick(&session, stuckTicks: 3).written }
        #expect(written == ["stuck 1 at 20"], "once, at the third empty deadline")
        leave([frame(2)], in: playback)
        #expect(try tick(&session, stuckTicks: 3).written == ["audio 2"])
        for _ in 1...2 { #expect(try tick(&session, stuckTicks: 3).written.isEmpty) }
        #expect(try tick(&session, stuckTicks: 3).written == ["stuck 1 at 40"], "a new stall after a frame")
        // Paused, it waits by choice: not stuck.
        _ = session.machine.handle(.pause)
        for _ in 1...5 { #expect(try tick(&session, stuckTicks: 3).written.isEmpty) }
    }

    /// A hand-over: the handing engine's last frame is the one before the answered position, and
    /// its `finished` names that position; the taking engine's play is silent until the moment,
    /// then sends the frames it encoded meanwhile, one per tick.
    @Test func aHandedOverPlayEndsWhereTheTakingPlayStarts() throws {
        let playback = play(1)
        var handing = started(playback, at: 1_000)
        leave([.opened(info, passthrough: false)] + (1...20).map { frame(UInt8($0)) }, in: playback)
        _ = try tick(&handing, wallMS: 100_000)
        // 1020 now; the moment is 100 ms ahead on the wall clock: five more frames.
        let position = handing.handOver(at: 100_100, now: 100_000)
        #expect(position == 1_120)
        var heard: [String] = []
        for tickNumber in 1...8 { heard += try tick(&handing, wallMS: 100_000 + Int64(tickNumber) * 20).written }
        #expect(heard == ["audio 2", "audio 3", "audio 4", "audio 5", "audio 6", "finished 1 stopped at 1120"])
        #expect(handing.playback == nil && handing.machine.state == .stopped)

        let taking = play(2)
        var session = started(taking, at: position)
        session.startAtMS = 100_100
        leave([.opened(info, passthrough: false), frame(6), frame(7)], in: taking)
        #expect(try tick(&session, wallMS: 100_080).written.isEmpty, "primed, waiting for the moment")
        #expect(try tick(&session, wallMS: 100_100).written == ["ready 2 at 1120", "audio 6"])
        #expect(try tick(&session, wallMS: 100_120).written == ["audio 7"])
    }

    /// A play that fell behind does not run on past the moment by more than a few ticks: the
    /// other engine is heard from then on.
    @Test func aHandOverEndsAtItsDeadlineWhenThePlayFellBehind() throws {
        let playback = play(1)
        var session = started(playback)
        leave([.opened(info, passthrough: false), frame(1)], in: playback)
        _ = try tick(&session, wallMS: 0)
        _ = session.handOver(at: 60, now: 0)
        #expect(try tick(&session, wallMS: 150).written.isEmpty, "starved, before the deadline")
        #expect(try tick(&session, wallMS: 160).written == ["finished 1 stopped at 20"])
    }

    @Test func progressFallsOnTheSessionsOwnTickOfTheInterval() throws {
        let playback = play(1)
        var session = started(playback)
        session.progressPhase = 3
        leave([.opened(info, passthrough: false)] + (1...10).map { frame(UInt8($0)) }, in: playback)
        var progress: [String] = []
        for _ in 1...10 { progress += try tick(&session, progressInterval: 5).written.filter { $0.hasPrefix("progress") } }
        #expect(progress == ["progress 1 at 40", "progress 1 at 140"], "frames 2 and 7: (frame + phase) % 5 == 0")
    }

    @Test func aReplacedPlayOwesEveryEndItCarried() throws {
        let first = play(1)
        var session = started(first)
        leave([.opened(info, passthrough: false), frame(1)], in: first)
        _ = try tick(&session)
        session.nextPlayID = 2
        session.fadingPlayID = 0
        let started = session.start(play(3), id, url: "other.mp3", startMS: 0, metadata: nil)
        #expect(started.replaced === first)
        #expect(started.events.map { "\($0.playID ?? 0) \($0.reason?.rawValue ?? "")" } == ["1 replaced", "0 replaced", "2 replaced"])
        #expect(session.machine.state == .extracting && session.machine.playID == 3)
        #expect(session.positionMS == 0 && session.title == nil && session.nextPlayID == nil)
    }

    /// A layer's events sit beside the frames that hold it; one called off ends once; the layers
    /// still sounding when their play ends end just before its `finished` (nothing of a play
    /// follows that), with the play they were asked on.
    @Test func layerEventsTravelWithTheirFramesAndEndBeforeTheirPlay() throws {
        let playback = play(1)
        var session = started(playback)
        session.layers = [(layerID: 5, playID: 1), (layerID: 6, playID: 1)]
        leave([.opened(info, passthrough: false), .layerStarted(5), frame(1), .layerEnded(5, .finished, nil)], in: playback)
        #expect(try tick(&session).written == ["ready 1 at 0", "layer_started 1", "audio 1"])
        leave([frame(2)], in: playback)
        #expect(try tick(&session).written == ["layer_ended 1 finished", "audio 2"])
        #expect(session.endLayer(5, id, reason: .stopped) == nil, "a layer ends once")
        leave([frame(3), .end(.finished, nil)], in: playback)
        _ = try tick(&session)
        #expect(try tick(&session).written == ["layer_ended 1 stopped", "finished 1 finished"])
        #expect(session.layers.isEmpty)
    }

    @Test func aFailedPlayEndsWithErrorThenFinishedAndLeavesTheSession() throws {
        let playback = play(1)
        var session = started(playback)
        session.nextPlayID = 2
        leave([.opened(info, passthrough: false), frame(1), .end(.error, APIError(status: .badGateway, code: "source_failed", message: "cut"))], in: playback)
        _ = try tick(&session)
        let (written, tick) = try tick(&session)
        #expect(written == ["error 1", "finished 1 error", "finished 2 stopped"], "the next play never starts")
        #expect(tick.failed?.code == "source_failed")
        #expect(tick.ended === playback && session.playback == nil)
        #expect(session.machine.state == .error)
    }

    @Test func aJoinedTrackIsTheSessionsPlayFromItsFirstFrame() throws {
        let playback = play(1)
        var session = started(playback)
        session.nextPlayID = 2
        let next = NextPlay(playID: 2, url: "next.mp3", fadeFloats: 0, metadata: TrackMetadata(url: "next.mp3", title: "Next"))
        leave(
            [.opened(info, passthrough: false), frame(1), .handover(next, info, passthrough: false), frame(2), .previousEnded(playID: 1), frame(3)],
            in: playback)
        #expect(try tick(&session).written == ["ready 1 at 0", "audio 1"])
        #expect(try tick(&session).written == ["ready 2 at 0", "audio 2"])
        #expect(session.machine.playID == 2 && session.title == "Next" && session.url == "next.mp3")
        #expect(session.fadingPlayID == 1 && session.nextPlayID == nil)
        #expect(try tick(&session).written == ["finished 1 finished", "audio 3"])
        #expect(session.fadingPlayID == nil)
    }

    @Test func aNextPlayThatFailsEndsAloneAndTheTrackPlaysOn() throws {
        let playback = play(1)
        var session = started(playback)
        session.nextPlayID = 2
        leave(
            [.opened(info, passthrough: false), .nextFailed(playID: 2, APIError(status: .badGateway, code: "source_failed", message: "x")), frame(1)],
            in: playback)
        #expect(try tick(&session).written == ["ready 1 at 0", "error 2", "finished 2 error", "audio 1"])
        #expect(session.nextPlayID == nil && session.machine.state == .streaming)
    }

    @Test func aStopIsOnceAndASeekStaysInsideTheTrack() throws {
        let playback = play(1)
        var session = started(playback)
        leave([.opened(info, passthrough: false)], in: playback)
        _ = try tick(&session)
        #expect(session.seek(toMS: 60_000) == 10_000)
        #expect(session.positionMS == 10_000)
        let stop = session.stop(id)
        #expect(stop?.playID == 1 && stop?.stopped === playback)
        #expect(stop?.events.map { $0.reason?.rawValue ?? "" } == ["stopped"])
        #expect(session.stop(id) == nil, "a second stop stops nothing")
        #expect(session.playback == nil)
    }

    @Test func onlyASessionIdlePastTheTimeoutExpires() throws {
        let playback = play(1)
        var session = started(playback)
        leave([.opened(info, passthrough: false)], in: playback)
        _ = try tick(&session)
        #expect(session.machine.handle(.pause) == .pause)
        let later = session.lastChange + .seconds(61)
        #expect(session.expire(id, now: session.lastChange + .seconds(59), idleTimeout: .seconds(60)) == nil)
        let expired = session.expire(id, now: later, idleTimeout: .seconds(60))
        #expect(expired?.ended === playback)
        #expect(expired?.events.map { $0.reason?.rawValue ?? "" } == ["cleanup"])
        var streaming = started(play(2))
        leave([.opened(info, passthrough: false)], in: streaming.playback!)
        _ = try tick(&streaming)
        #expect(streaming.expire(id, now: later + .seconds(600), idleTimeout: .seconds(60)) == nil, "a playing session stays")
    }

    @Test func aNextAskReplacesTheOneBeforeAndIsCalledOffOnce() throws {
        var idle = EngineSession(normalize: false)
        #expect(throws: APIError.self, "nothing plays to follow") { try idle.ask(next: 2, id) }
        let playback = play(1)
        var session = started(playback)
        let first = try session.ask(next: 2, id)
        #expect(first.playback === playback && first.events.isEmpty)
        let second = try session.ask(next: 3, id)
        #expect(second.events.map { "\($0.playID ?? 0) \($0.reason?.rawValue ?? "")" } == ["2 replaced"])
        #expect(session.callOffNext(id)?.playID == 3)
        #expect(session.callOffNext(id) == nil, "called off once")
    }
}
