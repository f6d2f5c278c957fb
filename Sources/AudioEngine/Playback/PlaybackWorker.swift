// The worker's side of one play: it owns the pipeline (FFmpeg, the renderer, the track opened
// ahead to follow) and carries out what the play's machine decides — open, reopen, seek, render
// again, take passthrough packets back, encode, hand over to the next track. Only the job holding
// the fill token calls it, so it needs no lock of its own; every look at the shared state goes
// through the machine's lock.
import EngineAPI
import NIOConcurrencyHelpers
import ServiceSupport
import WireProtocol

final class PlaybackWorker {
    /// What a fill works with, besides the play itself.
    struct Context {
        let encoder: OpusEncoderConfiguration
        let metrics: EngineMetrics
        let network: SourceNetwork?
        /// The engine's complexity in force and remembered loudness (nil in tests).
        var render: RenderContext? = nil
        /// Frames one fill encodes at most once a frame is in hand: a lead made deeper is then
        /// reached a frame a tick, not in one visit that holds every play behind it in the queue.
        var perVisit = Int.max
    }

    private let machine: NIOLockedValueBox<PlaybackMachine>
    private let startMS: Int64
    /// Loudness normalisation's target in LUFS.
    private let loudnessTarget: Double
    private var pipeline: Pipeline?
    /// The play the pipeline's track belongs to: the play's own, then each play joined after it.
    private var pipelinePlayID: UInt64
    /// The plays opened ahead to follow, by id (the next one, and during a fade the one after it).
    private var opened: [UInt64: NextPlay] = [:]
    /// `.opened` has been queued (once per play, not again after a reopen).
    private var announced = false
    /// The play's layers, open beside the track (across its joins).
    private let layers = LayerMixer()
    /// What the machine's passthrough refill was last set for, so it is written only on a change.
    private var refillsAsPassthrough = false
    /// Tests only: runs between rendering the lead again and putting it in the outbox, where
    /// the pacer may take a frame.
    var afterRenderingAgain: (() -> Void)?

    init(machine: NIOLockedValueBox<PlaybackMachine>, playID: UInt64, startMS: Int64, loudnessTarget: Double) {
        self.machine = machine
        self.startMS = startMS
        self.loudnessTarget = loudnessTarget
        pipelinePlayID = playID
    }

    /// Drops the pipeline and the layers, closing their sources (FFmpeg contexts, read-ahead threads).
    func closePipeline() {
        pipeline = nil
        layers.close()
    }

    /// Opens (or reopens) the pipeline, then steps as the machine says until the lead is full,
    /// the network is behind, or the play ends or is cancelled.
    func fill(lead: Int, passthroughLead: Int, context: Context) {
        if let (source, position) = machine.withLockedValue({ $0.reopening }) {
            pipeline = nil
            guard let reopened = makePipeline(source, startMS: position, lead: lead, context: context) else { return }
            pipeline = reopened
            machine.withLockedValue { $0.reopenDone() }
        }
        if pipeline == nil {
            guard let source = machine.withLockedValue({ $0.source }) else { return }
            pipeline = makePipeline(source, startMS: startMS, lead: lead, context: context)
        }
        guard var pipeline else { return }
        do {
            guard let info = try pipeline.open() else { return }  // still opening
            if !announced {
                announced = true
                let settings = machine.withLockedValue { RenderSettings(volume: $0.volume, filters: $0.filters, normalize: $0.normalize) }
                let passthrough = pipeline.passesThrough(volume: settings.volume, filters: settings.filters, normalize: settings.normalize)
                push(.opened(info, passthrough: passthrough), frames: 0, generation: nil)
            }
        } catch {
            push(.end(.error, APIError.wrap(error)), frames: 0, generation: nil)
            return
        }
        var encoded = 0
        while true {
            let view = machine.withLockedValue { $0.fillView() }
            if view.cancelled { return }
            prepare(view.next, after: pipeline, lead: lead, context: context)
            let passing = pipeline.passthrough && passthroughLead > lead
            switch view.step(lead: lead, passthroughLead: passthroughLead, passingThrough: passing) {
            case .stop:
                return
            case .seek(let position):
                // A seek during a fade is a seek in the next track: the fade ends there.
                if pipeline.isJoining, let joined = handOver(from: pipeline) { pipeline = joined }
                do {
                    try pipeline.seek(toMS: position)
                } catch {
                    push(.end(.error, APIError.wrap(error)), frames: 0, generation: view.generation)
                    return
                }
                machine.withLockedValue { $0.seekDone(generation: view.generation) }
            case .renderAgain:
                if !pipeline.passesThrough(volume: view.volume, filters: view.filters, normalize: view.normalize) {
                    takeBackPassthrough(pipeline, generation: view.generation)
                }
                renderLeadAgain(pipeline.renderer)
            case .leadFull:
                setRefill(passing: passing, passthroughLead: passthroughLead)
                return
            case .encode:
                setRefill(passing: passing, passthroughLead: passthroughLead)
                if !passing && encoded >= context.perVisit && view.bufferedFrames > 0 { return }
                encoded += 1
                if !view.layers.isEmpty || !layers.isEmpty {
                    layers.sync(with: view.layers, context: context, loudnessTarget: loudnessTarget)
                    pushLayerChanges(framePushed: true)
                }
                guard encode(&pipeline, view) else { return }
            }
        }
    }

    /// One packet from the pipeline into the outbox. False: the fill is over for now (the
    /// network is behind, the play ended or failed, the next track is not open yet).
    private func encode(_ pipeline: inout Pipeline, _ view: FillView) -> Bool {
        do {
            switch try pipeline.nextPacket(
                volume: view.volume, filters: view.filters, normalize: view.normalize, layers: layers, cue: view.cue)
            {
            case .pending:
                return false  // the network is behind: try again next tick
            case .end:
                if let following = pipeline.following {
                    // The next track was not joined within a frame (its source passes through
                    // whole packets, or it was not open yet): it starts with the next frame,
                    // once it is open.
                    guard following.pipeline.isReady else { return false }
                    announce(following, view)
                    guard let joined = handOver(from: pipeline) else { return false }
                    pipeline = joined
                    return true
                }
                push(.end(.finished, nil), frames: 0, generation: view.generation)
                return false
            case .value(let packet):
                if pipeline.joinStarted, let following = pipeline.following { announce(following, view) }
                pushLayerChanges(framePushed: false)
                push(
                    .frame(
                        packet, passthrough: pipeline.passthrough, sourceMicros: pipeline.lastSourceMicros,
                        rendered: pipeline.passthrough ? nil : pipeline.renderer.rendered - 1),
                    frames: 1, generation: view.generation)
                pushLayerChanges(framePushed: true)
                if pipeline.joinCompleted, let joined = handOver(from: pipeline) { pipeline = joined }
                return true
            }
        } catch {
            push(.end(.error, APIError.wrap(error)), frames: 0, generation: view.generation)
            return false
        }
    }

    private func makePipeline(_ source: ResolvedSource, startMS: Int64, lead: Int, context: Context) -> Pipeline? {
        do {
            return try Pipeline(
                source: source, encoder: context.encoder, startMS: startMS, loudnessTarget: loudnessTarget, lead: lead,
                metrics: context.metrics, network: context.network, render: context.render)
        } catch {
            push(.end(.error, APIError.wrap(error)), frames: 0, generation: nil)
            return nil
        }
    }

    private func setRefill(passing: Bool, passthroughLead: Int) {
        guard passing != refillsAsPassthrough else { return }
        refillsAsPassthrough = passing
        machine.withLockedValue { $0.setPassthroughRefill(at: passing ? passthroughLead / 2 : nil) }
    }

    /// Opens the play asked to follow ahead, attached to the track it follows (the next one's
    /// while a fade is under way), and replaces or drops it when the ask changed.
    private func prepare(_ asked: NextPlay?, after pipeline: Pipeline, lead: Int, context: Context) {
        let host = pipeline.isJoining ? (pipeline.following?.pipeline ?? pipeline) : pipeline
        // The play being faded into is not asked to follow itself.
        let asked = asked.flatMap { $0.playID == pipeline.following?.playID && pipeline.isJoining ? nil : $0 }
        if host.following?.playID != asked?.playID {
            guard let asked else {
                host.setFollowing(nil)
                return
            }
            guard let source = asked.source else { return }  // its page is being resolved
            do {
                let next = try Pipeline(
                    source: source, encoder: context.encoder, loudnessTarget: loudnessTarget, lead: lead,
                    metrics: context.metrics, network: context.network, render: context.render)
                host.setFollowing(.init(playID: asked.playID, pipeline: next, fadeFloats: asked.fadeFloats))
                opened = opened.filter { $0.key == pipeline.following?.playID }
                opened[asked.playID] = asked
            } catch {
                machine.withLockedValue { $0.failNext(APIError.wrap(error), playID: asked.playID) }
                return
            }
        }
        guard let following = host.following, !following.pipeline.isReady else { return }
        do {
            _ = try following.pipeline.open()
        } catch {
            host.setFollowing(nil)
            machine.withLockedValue { $0.failNext(APIError.wrap(error), playID: following.playID) }
        }
    }

    /// The next play is heard from the next frame: the pacer makes it the session's play. Once
    /// its samples are in a frame, the join stands even if the ask was withdrawn meanwhile.
    private func announce(_ following: Pipeline.Following, _ view: FillView) {
        guard let info = following.pipeline.info, var play = opened.removeValue(forKey: following.playID) else { return }
        play.startMS = following.pipeline.cueInFloats / (2 * 48)
        let passthrough = following.pipeline.passesThrough(volume: view.volume, filters: view.filters, normalize: view.normalize)
        machine.withLockedValue { $0.handOver(to: play, info: info, passthrough: passthrough) }
    }

    /// The join is complete: the previous play has ended, and the next track's pipeline carries on.
    private func handOver(from pipeline: Pipeline) -> Pipeline? {
        guard let following = pipeline.following, let joined = pipeline.handOver() else { return nil }
        let previous = pipelinePlayID
        pipelinePlayID = following.playID
        self.pipeline = joined
        machine.withLockedValue { $0.previousEnded(playID: previous) }
        return joined
    }

    /// Renders the frames still waiting in the outbox again with the settings now asked for, so
    /// the change is heard from the next frame the pacer sends. The pacer keeps sending while
    /// this runs: if it took the first of those frames meanwhile, the new ones no longer follow
    /// what was sent, and it tries again from the new first; the old frames stay if it cannot.
    private func renderLeadAgain(_ renderer: FrameRenderer) {
        // The live state after the last frame rendered, saved once an attempt is made.
        var saved: FrameRenderer.Saved?
        defer { if let saved { renderer.restore(saved) } }
        for _ in 0..<Playback.renderAgainAttempts {
            let (run, settings, generation) = machine.withLockedValue { $0.beginRenderAgain() }
            // Passthrough frames, or frames not numbered in a row up to the renderer's last,
            // cannot be made again: the change comes after them, as it always did.
            guard let run, run.upperBound == renderer.rendered, renderer.differs(from: settings, in: run) else { return }
            if saved == nil { saved = renderer.save() }
            guard let again = try? renderer.renderAgain(from: run.lowerBound, settings: settings) else { return }
            afterRenderingAgain?()
            if machine.withLockedValue({ $0.replaceRendered(run, generation: generation, with: again.packets) }) {
                renderer.commit(again)
                saved = nil
                return
            }
        }
    }

    /// The source's own packets waiting in the outbox cannot be rendered again, but they can be
    /// taken back (`PlaybackMachine.takeBackPassthrough`) and go back, decoded, in front of the
    /// source, so the frames that replace them are rendered with the settings that no longer let
    /// the source pass through.
    private func takeBackPassthrough(_ pipeline: Pipeline, generation: Int) {
        guard let taken = machine.withLockedValue({ $0.takeBackPassthrough(generation: generation) }) else { return }
        do {
            try pipeline.takeBack(taken.packets, after: taken.previous)
        } catch {
            push(.end(.error, APIError.wrap(error)), frames: 0, generation: generation)
        }
    }

    /// The layers that start in the frame about to be pushed (`framePushed` false), or that ended
    /// in the one just pushed or could not be opened (true), in order with the frames. An ended
    /// layer is no longer asked for.
    private func pushLayerChanges(framePushed: Bool) {
        let changes = layers.changes
        guard !changes.isEmpty else { return }
        machine.withLockedValue { machine in
            if framePushed {
                for ended in changes.ended {
                    guard machine.removeLayer(ended.layerID) != nil else { continue }
                    machine.push(.layerEnded(ended.layerID, ended.reason, ended.error), frames: 0, generation: nil)
                }
            } else {
                for started in changes.started { machine.push(.layerStarted(started), frames: 0, generation: nil) }
            }
        }
        if framePushed {
            layers.clearChanges()
        } else {
            layers.clearStarted()
        }
    }

    private func push(_ item: OutboxItem, frames: Int, generation: Int?) {
        machine.withLockedValue { $0.push(item, frames: frames, generation: generation) }
    }
}
