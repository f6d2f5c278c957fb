// A play's decisions step by step, with no worker, pacer, lock or FFmpeg: who may fill, what the
// pacer gets, and what a seek, a change of sound or a next play's ask does to the frames ahead.
import EngineAPI
import HTTPTypes
import ServiceSupport
import WireProtocol
import Testing

@testable import AudioEngine

@Suite struct PlaybackMachineTests {
    let source = ResolvedSource(location: "/media/tone.mp3", displayName: "tone")
    let info = MediaInfo(title: nil, durationMS: 1000, codec: "mp3", sampleRate: 44100, channels: 2, isOpusStereo48k: false)

    /// A play whose source is resolved, unless `resolved` is false (a page still resolving).
    func machine(resolved: Bool = true) -> PlaybackMachine {
        PlaybackMachine(volume: 100, filters: Filters(), normalize: false, source: resolved ? source : nil)
    }

    /// Frames numbered `numbers` by the renderer (nil: passed through), as a fill pushes them.
    func frames(_ numbers: [UInt64?], into machine: inout PlaybackMachine, generation: Int = 0) {
        for number in numbers {
            let frame = OutboxItem.frame([UInt8(truncatingIfNeeded: number ?? 0)], passthrough: number == nil, sourceMicros: 20_000, rendered: number)
            machine.push(frame, frames: 1, generation: generation)
        }
    }

    func kinds(_ machine: PlaybackMachine) -> [String] {
        machine.items.map { item in
            switch item {
            case .opened: "opened"
            case .frame(let packet, _, _, _): "frame \(packet.first ?? 0)"
            case .end(let reason, _): "end \(reason)"
            case .handover(let play, _, _): "handover \(play.playID)"
            case .previousEnded(let id): "previousEnded \(id)"
            case .nextFailed(let id, _): "nextFailed \(id)"
            case .layerStarted(let id): "layerStarted \(id)"
            case .layerEnded(let id, let reason, _): "layerEnded \(id) \(reason)"
            }
        }
    }

    /// Layers: asked, resolved, called off; a page that cannot be resolved ends its layer in the
    /// outbox; a seek drops the frames ahead but keeps the layers' markers (their events are owed).
    @Test func layersAreAskedResolvedAndEndedAndTheirMarkersOutliveASeek() {
        var play = machine()
        play.addLayer(LayerAsk(layerID: 7, url: "jingle.mp3", source: nil, volume: 100, duckDB: 12, attackMS: 50, releaseMS: 400))
        play.addLayer(LayerAsk(layerID: 8, url: "https://example.com/page", source: nil, volume: 50, duckDB: 6, attackMS: 0, releaseMS: 0))
        #expect(play.fillView().layers.map(\.layerID) == [7, 8] && play.fillView().layers.allSatisfy { $0.source == nil })
        play.provideLayer(source, layerID: 7)
        #expect(play.fillView().layers.first?.source == source)
        play.failLayer(8, APIError(status: .unprocessableContent, code: "unresolvable", message: "no"))
        #expect(kinds(play) == ["layerEnded 8 error"] && play.layers.map(\.layerID) == [7])
        play.failLayer(8, APIError(status: .unprocessableContent, code: "unresolvable", message: "no"))
        #expect(kinds(play).count == 1, "a layer ends once")
        frames([1], into: &play)
        play.push(.layerStarted(7), frames: 0, generation: 0)
        frames([2], into: &play)
        play.requestSeek(toMS: 500)
        #expect(kinds(play) == ["layerEnded 8 error", "layerStarted 7"])
        #expect(play.removeLayer(7)?.layerID == 7 && play.removeLayer(7) == nil && play.fillView().layers.isEmpty)
    }

    @Test func aPlayIsFilledOnlyWithASourceAndRoomInItsLead() {
        var waiting = machine(resolved: false)
        #expect(waiting.source == nil)
        #expect(waiting.claimFill(refillAt: 3) == nil, "a page still resolving has nothing to open")
        waiting.provide(source)
        let claim = waiting.claimFill(refillAt: 3)
        #expect(claim != nil)
        #expect(waiting.claimFill(refillAt: 3) == nil, "one job at a time")
        let claimStarts = waiting.startFill(claim: claim)
        #expect(claimStarts)
        frames([0, 1, 2, 3], into: &waiting)
        waiting.endFill()
        #expect(waiting.claimFill(refillAt: 3) == nil, "four frames ahead, refill at three")
        _ = waiting.nextItem()
        #expect(waiting.bufferedFrames == 3)
        #expect(waiting.claimFill(refillAt: 3) != nil)
    }

    @Test func passingThroughRefillsAtItsOwnThreshold() {
        var play = machine()
        frames([nil, nil, nil, nil, nil, nil], into: &play)
        #expect(play.claimFill(refillAt: 2) == nil)
        play.setPassthroughRefill(at: 6)
        #expect(play.claimFill(refillAt: 2) != nil)
    }

    @Test func anEndedOrCancelledPlayIsNotFilled() {
        var ended = machine()
        ended.push(.end(.finished, nil), frames: 0, generation: 0)
        #expect(ended.ended)
        #expect(ended.claimFill(refillAt: 3) == nil)
        // A seek after the end plays again from there.
        ended.requestSeek(toMS: 500)
        #expect(!ended.ended)
        #expect(ended.claimFill(refillAt: 3) != nil)

        var cancelled = machine()
        #expect(cancelled.cancel() == nil)
        #expect(cancelled.claimFill(refillAt: 3) == nil)
        #expect(cancelled.claimOrTakeOverFill() == nil)
        cancelled.push(.frame([1], passthrough: false, sourceMicros: 20_000, rendered: 0), frames: 1, generation: 0)
        cancelled.fail(APIError(status: .badGateway, code: "x", message: "x"))
        #expect(cancelled.items.isEmpty, "nothing reaches the pacer from a cancelled play")
    }

    @Test func aChangeTakesOverAQueuedClaimButNotARunningOne() {
        var play = machine()
        let queued = play.claimFill(refillAt: 3)
        play.setVolume(10)
        let takeover = play.claimOrTakeOverFill()
        #expect(takeover != nil && takeover != queued)
        let queuedStarts = play.startFill(claim: queued)
        #expect(!queuedStarts, "the queued job finds its claim gone")
        let takeoverStarts = play.startFill(claim: takeover)
        #expect(takeoverStarts)
        #expect(play.claimOrTakeOverFill() == nil, "a running fill reads the change itself")
        play.endFill()
        #expect(!play.filling)
    }

    @Test func closeTakesTheTokenOnlyWhenNoWorkerHoldsIt() {
        var held = machine()
        _ = held.claimFill(refillAt: 3)
        let heldCloses = held.claimForClose()
        #expect(!heldCloses)
        var idle = machine()
        let idleCloses = idle.claimForClose()
        #expect(idleCloses)
        #expect(idle.cancelled)
        #expect(idle.claimFill(refillAt: 3) == nil)
    }

    @Test func aSeekDropsTheLeadButKeepsTheJoinsMarkersAndStaleFramesAreDropped() {
        var play = machine()
        frames([0, 1], into: &play)
        play.handOver(to: NextPlay(playID: 2, url: "b", fadeFloats: 0, source: source), info: info, passthrough: false)
        frames([2], into: &play)
        play.previousEnded(playID: 1)
        play.requestSeek(toMS: 30_000)
        #expect(kinds(play) == ["handover 2", "previousEnded 1"])
        #expect(play.bufferedFrames == 0)
        #expect(play.generation == 1)
        // A frame a worker was encoding before the seek arrives late: dropped.
        frames([3], into: &play, generation: 0)
        #expect(play.bufferedFrames == 0)
        #expect(play.fillView().step(lead: 3, passthroughLead: 0, passingThrough: false) == .seek(toMS: 30_000))
        // A second seek before the first is done: the first's completion leaves it pending.
        play.requestSeek(toMS: 40_000)
        play.seekDone(generation: 1)
        #expect(play.pendingSeekMS == 40_000)
        play.seekDone(generation: 2)
        #expect(play.pendingSeekMS == nil)
    }

    @Test func theWorkersNextStep() {
        var play = machine()
        #expect(play.fillView().step(lead: 2, passthroughLead: 6, passingThrough: false) == .encode)
        frames([0, 1], into: &play)
        #expect(play.fillView().step(lead: 2, passthroughLead: 6, passingThrough: false) == .leadFull)
        #expect(play.fillView().step(lead: 2, passthroughLead: 6, passingThrough: true) == .encode)
        play.setFilters(Filters())
        #expect(play.fillView().step(lead: 2, passthroughLead: 6, passingThrough: false) == .renderAgain)
        _ = play.beginRenderAgain()
        #expect(play.fillView().step(lead: 2, passthroughLead: 6, passingThrough: false) == .leadFull)
        _ = play.cancel()
        #expect(play.fillView().step(lead: 2, passthroughLead: 6, passingThrough: false) == .stop)
    }

    @Test func framesRenderedAgainReplaceTheLeadOnlyIfThePacerTookNoneOfThem() {
        var play = machine()
        frames([4, 5, 6], into: &play)
        play.setVolume(50)
        let (run, settings, generation) = play.beginRenderAgain()
        #expect(run == 4..<7)
        #expect(settings.volume == 50)
        #expect(!play.renderAgain)
        _ = play.nextItem()  // the pacer took frame 4 meanwhile
        let staleReplaced = play.replaceRendered(4..<7, generation: generation, with: [[40], [50], [60]])
        #expect(!staleReplaced)
        let (run2, _, generation2) = play.beginRenderAgain()
        #expect(run2 == 5..<7)
        let replaced = play.replaceRendered(5..<7, generation: generation2, with: [[50], [60]])
        #expect(replaced)
        #expect(kinds(play) == ["frame 50", "frame 60"])
        // Frames not numbered in a row (or passed through) cannot be rendered again.
        frames([nil], into: &play)
        #expect(play.beginRenderAgain().run == nil)
    }

    @Test func passthroughPacketsAreTakenBackButTheFirstAndNotAcrossAJoin() {
        var play = machine()
        frames([nil, nil, nil], into: &play)
        let taken = play.takeBackPassthrough(generation: 0)
        #expect(taken?.previous == [0] && taken?.packets.count == 2)
        #expect(play.bufferedFrames == 1)
        #expect(play.takeBackPassthrough(generation: 0) == nil, "one packet left: the pacer may be sending it")

        var joined = machine()
        frames([nil, nil], into: &joined)
        joined.handOver(to: NextPlay(playID: 2, url: "b", fadeFloats: 0, source: source), info: info, passthrough: true)
        frames([nil], into: &joined)
        #expect(joined.takeBackPassthrough(generation: 0) == nil)
        #expect(joined.bufferedFrames == 3)
    }

    @Test func theNextPlaysAskIsReplacedFailedOrHeard() {
        var play = machine()
        let first = NextPlay(playID: 2, url: "b", fadeFloats: 0, source: nil)
        #expect(play.setNext(first) == nil)
        #expect(play.setNext(first) == nil, "asking the same play again withdraws nothing")
        let second = NextPlay(playID: 3, url: "c", fadeFloats: 0, source: nil)
        #expect(play.setNext(second)?.playID == 2, "the ask replaced is no longer wanted")
        play.provideNext(source, playID: 2)
        #expect(play.next?.source == nil, "a late resolution of a withdrawn ask changes nothing")
        play.provideNext(source, playID: 3)
        #expect(play.next?.source?.location == source.location)
        play.failNext(APIError(status: .badGateway, code: "x", message: "x"), playID: 2)
        #expect(play.next?.playID == 3 && play.items.isEmpty)
        play.failNext(APIError(status: .badGateway, code: "x", message: "x"), playID: 3)
        #expect(play.next == nil)
        #expect(kinds(play) == ["nextFailed 3"])
        #expect(play.setNext(second) == nil)
        play.handOver(to: second, info: info, passthrough: false)
        #expect(play.next == nil, "heard: no longer asked")
        #expect(play.cancel() == nil)
    }

    @Test func aStaleSourceWaitsForItsReopening() {
        var play = machine()
        frames([0, 1], into: &play)
        play.invalidateSource()
        #expect(play.bufferedFrames == 0 && play.source == nil)
        #expect(play.claimFill(refillAt: 3) == nil)
        #expect(play.reopening == nil)
        play.reopen(with: source, atMS: 61_000)
        #expect(play.reopening?.positionMS == 61_000)
        #expect(play.claimFill(refillAt: 3) != nil)
        play.reopenDone()
        #expect(play.reopening == nil)
    }
}
