// One play of one session: its source pipeline, and the outbox of encoded frames and in-band
// markers that the pacer drains one frame per tick.
import EngineAPI
import NIOConcurrencyHelpers
import NIOCore
import ServiceSupport
import WireProtocol

/// What the pacer finds at the head of a playback's outbox.
enum OutboxItem {
    /// The source opened; the pacer moves the session to Streaming and emits `ready`.
    case opened(MediaInfo, passthrough: Bool)
    /// An encoded frame, and the source time it covers in µs (20,000 but under a timescale);
    /// `rendered` is its number in the pipeline's renderer (nil when it passed through).
    case frame([UInt8], passthrough: Bool, sourceMicros: Int, rendered: UInt64?)
    /// The play is over: `finished` (source ended) or `error` (it failed).
    case end(FinishReason, APIError?)
    /// The next play is heard from the following frame (a gapless join or a crossfade's start):
    /// it becomes the session's play, and `ready` says so.
    case handover(NextPlay, MediaInfo, passthrough: Bool)
    /// The previous play's last samples went out (the join or the fade is complete): `finished`.
    case previousEnded(playID: UInt64)
    /// The next play could not be opened: `error` and `finished` for it; the current one goes on
    /// to its end.
    case nextFailed(playID: UInt64, APIError)
}

/// A play asked to follow the current one.
struct NextPlay: Sendable {
    let playID: UInt64
    let url: String
    /// Interleaved floats of the crossfade (0: gapless).
    let fadeFloats: Int
    var metadata: TrackMetadata?
    /// nil while a page URL is being resolved.
    var source: ResolvedSource?
    /// Fires when this play is no longer wanted (replaced by another ask, called off, or the play
    /// it follows ended): its page resolution stops.
    let cancellation = CancellationSignal()
}

/// A single play on a session. Frames are produced by worker threads and consumed by the pacer.
///
/// `@unchecked Sendable`: the mutable outbox is behind a lock; `pipeline` is touched only by
/// the one worker job that holds the fill token (`Outbox.filling`), so never concurrently.
final class Playback: @unchecked Sendable {
    struct Outbox {
        var items = CircularBuffer<OutboxItem>(initialCapacity: 8)
        var bufferedFrames = 0
        /// While packets pass through: refill at this many frames (instead of the pacer's
        /// threshold), since the passthrough lead is deeper.
        var passthroughRefillAt: Int?
        /// A worker job owns the pipeline while this is set.
        var filling = false
        /// The number of the claim `filling` stands for: a job carries the number it was queued
        /// with, and one whose claim was taken over (`claimOrTakeOverFill`) finds it changed.
        var fillClaim: UInt64 = 0
        /// The job holding the claim has started: it can no longer be taken over.
        var fillRunning = false
        var cancelled = false
        /// The end item has been queued; no more work for the workers.
        var ended = false
        /// Bumped by a seek: frames encoded for an older generation are discarded.
        var generation = 0
        /// A seek the worker has still to carry out on the pipeline.
        var pendingSeekMS: Int64?
        /// Target volume in percent; the pipeline ramps to it.
        var volume = 100
        /// The filters the pipeline applies from its next frame.
        var filters = Filters()
        /// Whether the pipeline brings the track to the target loudness.
        var normalize = false
        /// Volume, filters or normalisation changed: the frames encoded ahead are rendered again.
        var renderAgain = false
        /// The source is resolved and may be opened (page URLs wait for yt-dlp).
        var source: ResolvedSource?
        /// The stream URL expired: reopen the (re-resolved) source at this position.
        var pendingReopenMS: Int64?
        /// The play asked to follow this one; cleared once it is heard.
        var next: NextPlay?

        /// The renderer's numbers of the frames waiting, when every one was rendered and they
        /// follow each other.
        var renderedRun: Range<UInt64>? {
            var run: Range<UInt64>?
            for item in items {
                guard case .frame(_, _, _, let number) = item else { continue }
                guard let number else { return nil }
                guard let sofar = run else {
                    run = number..<number + 1
                    continue
                }
                guard number == sofar.upperBound else { return nil }
                run = sofar.lowerBound..<number + 1
            }
            return run
        }

        /// Drops what was encoded ahead (but not the markers of a join: their events are owed);
        /// a frame a worker is encoding now is discarded on arrival.
        mutating func discardEncoded() {
            items = CircularBuffer(
                items.lazy.filter { item in
                    switch item {
                    case .handover, .previousEnded, .nextFailed: true
                    default: false
                    }
                })
            bufferedFrames = 0
            ended = false
            generation += 1
        }
    }

    let sessionID: SessionID
    let playID: UInt64
    let url: String
    let startMS: Int64
    /// Loudness normalisation's target in LUFS.
    let loudnessTarget: Double
    /// A pthread mutex (NIO's), not `Synchronization.Mutex`: the pacer and a worker contend for it
    /// every tick, and ThreadSanitizer cannot see the Mutex's contended futex path (it reported
    /// the locked accesses as races).
    let outbox: NIOLockedValueBox<Outbox>
    /// Fires when the play is stopped or replaced: work done for it elsewhere (yt-dlp resolving
    /// its page) is cancelled with it.
    let cancellation = CancellationSignal()

    /// Owned by the worker holding the fill token.
    private var pipeline: Pipeline?
    /// The play the pipeline's track belongs to: `playID`, then each play joined after it.
    private var pipelinePlayID: UInt64
    /// The plays opened ahead to follow, by id (the next one, and during a fade the one after it).
    private var opened: [UInt64: NextPlay] = [:]
    /// `.opened` has been queued (once per play, not again after a reopen).
    private var announced = false
    /// What the outbox's `passthroughRefillAt` was last set for, so it is written only on a change.
    private var refillsAsPassthrough = false

    init(
        sessionID: SessionID, playID: UInt64, url: String, startMS: Int64, volume: Int, filters: Filters = Filters(),
        normalize: Bool = false, loudnessTarget: Double = LoudnessNormalizer.defaultTarget, source: ResolvedSource?
    ) {
        self.sessionID = sessionID
        self.loudnessTarget = loudnessTarget
        self.playID = playID
        pipelinePlayID = playID
        self.url = url
        self.startMS = startMS
        var box = Outbox()
        box.volume = volume
        box.filters = filters
        box.normalize = normalize
        box.source = source
        outbox = NIOLockedValueBox(box)
    }

    /// Takes the fill token if the outbox holds at most `refillAt` frames (the passthrough
    /// threshold while packets pass through) and there is work.
    func claimFill(refillAt: Int) -> Bool { claimFillNumber(refillAt: refillAt) != nil }

    /// `claimFill`, returning the claim's number for the job to carry to `fill(claim:)`.
    func claimFillNumber(refillAt: Int) -> UInt64? {
        outbox.withLockedValue { box in
            guard !box.filling, !box.cancelled, box.source != nil,
                box.pendingSeekMS != nil || box.pendingReopenMS != nil || (box.renderAgain && box.bufferedFrames > 0)
                    || (!box.ended && box.bufferedFrames <= max(refillAt, box.passthroughRefillAt ?? refillAt))
            else { return nil }
            box.filling = true
            box.fillRunning = false
            box.fillClaim &+= 1
            return box.fillClaim
        }
    }

    /// A change's side: claims the fill token, or takes it over from a job a tick queued that has
    /// not started yet (that job, when its turn comes, finds its claim gone and leaves the play
    /// alone). The change is then rendered on the caller's thread pool at once instead of behind
    /// the tick's queue of refills. Nil while a fill is running (it reads the change as it goes).
    func claimOrTakeOverFill() -> UInt64? {
        if let claim = claimFillNumber(refillAt: Int.max) { return claim }
        return outbox.withLockedValue { box in
            guard box.filling, !box.fillRunning, !box.cancelled, box.source != nil else { return nil }
            box.fillClaim &+= 1
            return box.fillClaim
        }
    }

    func cancel() {
        let next = outbox.withLockedValue { box in
            box.cancelled = true
            return box.next
        }
        cancellation.fire()
        next?.cancellation.fire()
    }

    /// Closes the source of a cancelled or ended play (FFmpeg contexts, the read-ahead thread).
    /// Call on a thread that may block; if a worker holds the pipeline, it closes it instead.
    func close() {
        let owned = outbox.withLockedValue { box -> Bool in
            guard !box.filling else { return false }
            box.filling = true
            box.fillRunning = true
            box.fillClaim &+= 1
            box.cancelled = true
            return true
        }
        guard owned else { return }
        pipeline = nil
        outbox.withLockedValue {
            $0.filling = false
            $0.fillRunning = false
        }
    }

    /// Hands over a source resolved after the play started (a page URL through yt-dlp).
    func provide(_ source: ResolvedSource) {
        outbox.withLockedValue { $0.source = source }
    }

    /// Drops everything encoded ahead and asks the worker to seek (the control thread's side).
    func requestSeek(toMS position: Int64) {
        outbox.withLockedValue { box in
            box.discardEncoded()
            box.pendingSeekMS = position
        }
    }

    /// The stream URL went stale during a long pause: drop what was encoded and wait for the
    /// re-resolved source (`reopen(with:atMS:)`).
    func invalidateSource() {
        outbox.withLockedValue { box in
            box.discardEncoded()
            box.source = nil
        }
    }

    /// Continues the play from `position` on a freshly resolved source.
    func reopen(with source: ResolvedSource, atMS position: Int64) {
        outbox.withLockedValue { box in
            box.source = source
            box.pendingReopenMS = position
        }
    }

    /// The source the play is using (or will use).
    var source: ResolvedSource? { outbox.withLockedValue { $0.source } }

    func setVolume(_ volume: Int) {
        outbox.withLockedValue { box in
            box.volume = volume
            box.renderAgain = true
        }
    }

    func setFilters(_ filters: Filters) {
        outbox.withLockedValue { box in
            box.filters = filters
            box.renderAgain = true
        }
    }

    /// Plays `next` after the current track (nil: nothing follows); the play asked before, if
    /// another, is no longer wanted.
    func setNext(_ next: NextPlay?) {
        let previous = outbox.withLockedValue { box in
            defer { box.next = next }
            return box.next
        }
        if let previous, previous.playID != next?.playID { previous.cancellation.fire() }
    }

    /// Hands over the source of the next play once its page is resolved.
    func provideNext(_ source: ResolvedSource, playID: UInt64) {
        outbox.withLockedValue { box in
            guard box.next?.playID == playID else { return }
            box.next?.source = source
            box.next?.metadata = source.metadata
        }
    }

    /// The next play's page could not be resolved.
    func failNext(_ error: any Error, playID: UInt64) {
        outbox.withLockedValue { box in
            guard box.next?.playID == playID, !box.cancelled else { return }
            box.next = nil
            box.items.append(.nextFailed(playID: playID, APIError.wrap(error)))
        }
    }

    func setNormalize(_ normalize: Bool) {
        outbox.withLockedValue { box in
            box.normalize = normalize
            box.renderAgain = true
        }
    }

    /// Worker side: opens the pipeline if needed, carries out a pending seek, and encodes frames
    /// until `lead` are buffered (`passthroughLead` while packets pass through: they cost a few
    /// hundred bytes each and nothing to take back, so a deeper lead buys slack for nothing).
    /// Must be called holding the fill token (`claim`: the number it was claimed with; nil for a
    /// caller that holds it otherwise); releases it. A job whose claim was taken over returns at
    /// once. Never waits for the network: a network source that is still opening, or whose next
    /// packet has not arrived, leaves the outbox as it is until the next tick.
    func fill(
        lead: Int, passthroughLead: Int = 0, encoder configuration: OpusEncoderConfiguration, metrics: EngineMetrics,
        network: SourceNetwork?, claim: UInt64? = nil
    ) {
        let mine = outbox.withLockedValue { box -> Bool in
            guard box.filling, !box.fillRunning, claim == nil || claim == box.fillClaim else { return false }
            box.fillRunning = true
            return true
        }
        guard mine else { return }
        defer {
            // A cancelled play closes its source here, on a worker thread, never on the pacer's.
            if outbox.withLockedValue({ $0.cancelled }) { pipeline = nil }
            outbox.withLockedValue {
                $0.filling = false
                $0.fillRunning = false
            }
        }
        if let (source, position) = outbox.withLockedValue({ box in box.pendingReopenMS.flatMap { p in box.source.map { ($0, p) } } }) {
            pipeline = nil
            do {
                pipeline = try Pipeline(
                    source: source, encoder: configuration, startMS: position, loudnessTarget: loudnessTarget, lead: lead,
                    metrics: metrics, network: network)
                outbox.withLockedValue { $0.pendingReopenMS = nil }
            } catch {
                push(.end(.error, APIError.wrap(error)), frames: 0, generation: nil)
                return
            }
        }
        if pipeline == nil {
            guard let source = outbox.withLockedValue({ $0.source }) else { return }
            do {
                pipeline = try Pipeline(
                    source: source, encoder: configuration, startMS: startMS, loudnessTarget: loudnessTarget, lead: lead,
                    metrics: metrics, network: network)
            } catch {
                push(.end(.error, APIError.wrap(error)), frames: 0, generation: nil)
                return
            }
        }
        guard var pipeline else { return }
        do {
            guard let info = try pipeline.open() else { return }  // still opening
            if !announced {
                announced = true
                let (volume, filters, normalize) = outbox.withLockedValue { ($0.volume, $0.filters, $0.normalize) }
                let passthrough = pipeline.passesThrough(volume: volume, filters: filters, normalize: normalize)
                push(.opened(info, passthrough: passthrough), frames: 0, generation: nil)
            }
        } catch {
            push(.end(.error, APIError.wrap(error)), frames: 0, generation: nil)
            return
        }
        while true {
            let (buffered, stop, seek, volume, filters, normalize, generation, again, next) = outbox.withLockedValue {
                (
                    $0.bufferedFrames, $0.cancelled, $0.pendingSeekMS, $0.volume, $0.filters, $0.normalize, $0.generation,
                    $0.renderAgain, $0.next
                )
            }
            if stop { return }
            prepare(next, after: pipeline, encoder: configuration, lead: lead, metrics: metrics, network: network)
            if let seek {
                // A seek during a fade is a seek in the next track: the fade ends there.
                if pipeline.isJoining, let joined = handOver(from: pipeline) { pipeline = joined }
                do {
                    try pipeline.seek(toMS: seek)
                } catch {
                    push(.end(.error, APIError.wrap(error)), frames: 0, generation: generation)
                    return
                }
                outbox.withLockedValue { if $0.generation == generation { $0.pendingSeekMS = nil } }
                continue
            }
            if again {
                if !pipeline.passesThrough(volume: volume, filters: filters, normalize: normalize) {
                    takeBackPassthrough(pipeline, generation: generation)
                }
                renderLeadAgain(pipeline.renderer)
                continue
            }
            let passing = pipeline.passthrough && passthroughLead > lead
            if passing != refillsAsPassthrough {
                refillsAsPassthrough = passing
                outbox.withLockedValue { $0.passthroughRefillAt = passing ? passthroughLead / 2 : nil }
            }
            if buffered >= (passing ? passthroughLead : lead) { return }
            do {
                switch try pipeline.nextPacket(volume: volume, filters: filters, normalize: normalize) {
                case .pending:
                    return  // the network is behind: try again next tick
                case .end:
                    if let following = pipeline.following {
                        // The next track was not joined within a frame (its source passes through
                        // whole packets, or it was not open yet): it starts with the next frame,
                        // once it is open.
                        guard following.pipeline.isReady else { return }
                        announce(following, of: pipeline, volume: volume, filters: filters, normalize: normalize)
                        guard let joined = handOver(from: pipeline) else { return }
                        pipeline = joined
                        continue
                    }
                    push(.end(.finished, nil), frames: 0, generation: generation)
                    return
                case .value(let packet):
                    if pipeline.joinStarted, let following = pipeline.following {
                        announce(following, of: pipeline, volume: volume, filters: filters, normalize: normalize)
                    }
                    push(
                        .frame(
                            packet, passthrough: pipeline.passthrough, sourceMicros: pipeline.lastSourceMicros,
                            rendered: pipeline.passthrough ? nil : pipeline.renderer.rendered - 1),
                        frames: 1, generation: generation)
                    if pipeline.joinCompleted, let joined = handOver(from: pipeline) { pipeline = joined }
                }
            } catch {
                push(.end(.error, APIError.wrap(error)), frames: 0, generation: generation)
                return
            }
        }
    }

    /// Opens the play asked to follow ahead, attached to the track it follows (the next one's
    /// while a fade is under way), and replaces or drops it when the ask changed.
    private func prepare(
        _ asked: NextPlay?, after pipeline: Pipeline, encoder configuration: OpusEncoderConfiguration, lead: Int,
        metrics: EngineMetrics, network: SourceNetwork?
    ) {
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
                    source: source, encoder: configuration, loudnessTarget: loudnessTarget, lead: lead, metrics: metrics,
                    network: network)
                host.setFollowing(.init(playID: asked.playID, pipeline: next, fadeFloats: asked.fadeFloats))
                opened = opened.filter { $0.key == pipeline.following?.playID }
                opened[asked.playID] = asked
            } catch {
                failNext(error, playID: asked.playID)
                return
            }
        }
        guard let following = host.following, !following.pipeline.isReady else { return }
        do {
            _ = try following.pipeline.open()
        } catch {
            host.setFollowing(nil)
            failNext(error, playID: following.playID)
        }
    }

    /// The next play is heard from the next frame: the pacer makes it the session's play. Once
    /// its samples are in a frame, the join stands even if the ask was withdrawn meanwhile.
    private func announce(
        _ following: Pipeline.Following, of pipeline: Pipeline, volume: Int, filters: Filters, normalize: Bool
    ) {
        guard let info = following.pipeline.info, let play = opened.removeValue(forKey: following.playID) else { return }
        let passthrough = following.pipeline.passesThrough(volume: volume, filters: filters, normalize: normalize)
        outbox.withLockedValue { box in
            guard !box.cancelled else { return }
            if box.next?.playID == following.playID { box.next = nil }
            box.items.append(.handover(play, info, passthrough: passthrough))
        }
    }

    /// The join is complete: the previous play has ended, and the next track's pipeline carries on.
    private func handOver(from pipeline: Pipeline) -> Pipeline? {
        guard let following = pipeline.following, let joined = pipeline.handOver() else { return nil }
        let previous = pipelinePlayID
        pipelinePlayID = following.playID
        self.pipeline = joined
        outbox.withLockedValue { box in
            guard !box.cancelled else { return }
            box.items.append(.previousEnded(playID: previous))
        }
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
        for _ in 0..<Self.renderAgainAttempts {
            let (run, settings, generation) = outbox.withLockedValue { box in
                box.renderAgain = false
                return (box.renderedRun, RenderSettings(volume: box.volume, filters: box.filters, normalize: box.normalize), box.generation)
            }
            // Passthrough frames, or frames not numbered in a row up to the renderer's last,
            // cannot be made again: the change comes after them, as it always did.
            guard let run, run.upperBound == renderer.rendered, renderer.differs(from: settings, in: run) else { return }
            if saved == nil { saved = renderer.save() }
            guard let again = try? renderer.renderAgain(from: run.lowerBound, settings: settings) else { return }
            afterRenderingAgain?()
            let replaced = outbox.withLockedValue { box -> Bool in
                guard box.generation == generation, box.renderedRun == run else { return false }
                var index = box.items.startIndex
                var next = 0
                while index != box.items.endIndex, next < again.packets.count {
                    if case .frame(_, let passthrough, let micros, let number) = box.items[index] {
                        box.items[index] = .frame(again.packets[next], passthrough: passthrough, sourceMicros: micros, rendered: number)
                        next += 1
                    }
                    index = box.items.index(after: index)
                }
                return true
            }
            if replaced {
                renderer.commit(again)
                saved = nil
                return
            }
        }
    }

    /// The source's own packets waiting in the outbox cannot be rendered again, but they can be
    /// taken back: all but the first (which the pacer may be about to send) leave the outbox and
    /// go back, decoded, in front of the source, so the frames that replace them are rendered
    /// with the settings that no longer let the source pass through.
    private func takeBackPassthrough(_ pipeline: Pipeline, generation: Int) {
        let taken = outbox.withLockedValue { box -> (previous: [UInt8], packets: [[UInt8]])? in
            guard box.generation == generation, !box.ended else { return nil }
            var previous: [UInt8]?
            var packets: [[UInt8]] = []
            var kept = CircularBuffer<OutboxItem>(initialCapacity: box.items.count)
            for item in box.items {
                guard case .frame(let packet, let passthrough, _, _) = item else {
                    // Packets on both sides of a join belong to two tracks: they are left to go
                    // out as they are (the change then follows them, two frames at most).
                    if case .handover = item { return nil }
                    kept.append(item)
                    continue
                }
                // Only a run of untouched packets at the end of the outbox can go back.
                guard passthrough else { return nil }
                if previous == nil {
                    previous = packet
                    kept.append(item)
                } else {
                    packets.append(packet)
                }
            }
            guard let previous, !packets.isEmpty else { return nil }
            box.items = kept
            box.bufferedFrames -= packets.count
            return (previous, packets)
        }
        guard let taken else { return }
        do {
            try pipeline.takeBack(taken.packets, after: taken.previous)
        } catch {
            push(.end(.error, APIError.wrap(error)), frames: 0, generation: generation)
        }
    }

    /// Tests only: runs between rendering the lead again and putting it in the outbox, where
    /// the pacer may take a frame.
    var afterRenderingAgain: (() -> Void)?

    /// Tries at rendering the lead again before the change is left to follow it (each attempt
    /// takes a lead's encodes; the pacer takes a frame every 20 ms).
    static let renderAgainAttempts = 4

    private func push(_ item: OutboxItem, frames: Int, generation: Int?) {
        outbox.withLockedValue { box in
            guard !box.cancelled else { return }
            if let generation, generation != box.generation { return }
            if case .end = item { box.ended = true }
            box.items.append(item)
            box.bufferedFrames += frames
        }
    }
}

extension Playback {
    /// Takes the oldest item of the outbox (the pacer's side), nil when none is ready.
    func nextOutboxItem() -> OutboxItem? {
        outbox.withLockedValue { box in
            guard let item = box.items.popFirst() else { return nil }
            if case .frame = item { box.bufferedFrames -= 1 }
            return item
        }
    }

    /// Ends the play with an error that happened outside the pipeline (yt-dlp could not resolve it).
    func fail(_ error: any Error) {
        outbox.withLockedValue { box in
            guard !box.cancelled, !box.ended else { return }
            box.ended = true
            box.items.append(.end(.error, APIError.wrap(error)))
        }
    }
}
