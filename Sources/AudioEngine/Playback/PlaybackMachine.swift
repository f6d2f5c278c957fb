// Every decision of one play, as a value: who may work on its pipeline (the fill token, its
// claims and takeover), what the pacer finds next, what a seek, a reopen, a change of sound or a
// next play's ask does to the frames encoded ahead, and what the worker does next. `Playback`
// keeps it behind a lock and carries its answers out (`PlaybackWorker` on the pipeline); nothing
// here touches a thread, a clock or FFmpeg, so each rule is tested step by step
// (`PlaybackMachineTests`).
import EngineAPI
import NIOCore
import WireProtocol
import ServiceSupport

struct PlaybackMachine {
    /// The frames and markers the pacer takes, oldest first.
    private(set) var items = CircularBuffer<OutboxItem>(initialCapacity: 8)
    private(set) var bufferedFrames = 0
    /// While packets pass through: refill at this many frames (instead of the pacer's
    /// threshold), since the passthrough lead is deeper.
    private(set) var passthroughRefillAt: Int?
    /// A worker job owns the pipeline while this is set.
    private(set) var filling = false
    /// The number of the claim `filling` stands for: a job carries the number it was queued
    /// with, and one whose claim was taken over (`takeOverFill`) finds it changed.
    private(set) var fillClaim: UInt64 = 0
    /// The job holding the claim has started: it can no longer be taken over. (Settable for the
    /// tests that stand for a running job.)
    var fillRunning = false
    private(set) var cancelled = false
    /// The end item has been queued; no more work for the workers.
    private(set) var ended = false
    /// Bumped by a seek: frames encoded for an older generation are discarded.
    private(set) var generation = 0
    /// A seek the worker has still to carry out on the pipeline.
    private(set) var pendingSeekMS: Int64?
    /// Target volume in percent; the pipeline ramps to it.
    private(set) var volume = 100
    /// The filters the pipeline applies from its next frame.
    private(set) var filters = Filters()
    /// Whether the pipeline brings the track to the target loudness.
    private(set) var normalize = false
    /// Whether joins use cue points (read at each frame; nothing encoded is rendered again).
    private(set) var cue = false
    /// Volume, filters or normalisation changed: the frames encoded ahead are rendered again.
    private(set) var renderAgain = false
    /// The source is resolved and may be opened (page URLs wait for yt-dlp).
    private(set) var source: ResolvedSource?
    /// The stream URL expired: reopen the (re-resolved) source at this position.
    private(set) var pendingReopenMS: Int64?
    /// The play asked to follow this one; cleared once it is heard.
    private(set) var next: NextPlay?
    /// The layers asked for and not ended, oldest first.
    private(set) var layers: [LayerAsk] = []

    init(volume: Int, filters: Filters, normalize: Bool, cue: Bool = false, source: ResolvedSource?) {
        self.cue = cue
        self.volume = volume
        self.filters = filters
        self.normalize = normalize
        self.source = source
    }

    // MARK: The fill token

    /// Takes the fill token if the outbox holds at most `refillAt` frames (the passthrough
    /// threshold while packets pass through) and there is work: the claim's number, for the job
    /// to carry to `startFill(claim:)`.
    mutating func claimFill(refillAt: Int) -> UInt64? {
        guard !filling, !cancelled, source != nil,
            pendingSeekMS != nil || pendingReopenMS != nil || (renderAgain && bufferedFrames > 0)
                || (!ended && bufferedFrames <= max(refillAt, passthroughRefillAt ?? refillAt))
        else { return nil }
        filling = true
        fillRunning = false
        fillClaim &+= 1
        return fillClaim
    }

    /// A change's side: claims the fill token, or takes it over from a job that has not started
    /// yet (that job finds its claim gone). Nil while a fill is running: it reads the change as
    /// it goes.
    mutating func claimOrTakeOverFill() -> UInt64? {
        if let claim = claimFill(refillAt: Int.max) { return claim }
        guard filling, !fillRunning, !cancelled, source != nil else { return nil }
        fillClaim &+= 1
        return fillClaim
    }

    /// A job's start: whether it still holds the token (`claim` nil: a caller that holds it
    /// otherwise). From here on it cannot be taken over.
    mutating func startFill(claim: UInt64?) -> Bool {
        guard filling, !fillRunning, claim == nil || claim == fillClaim else { return false }
        fillRunning = true
        return true
    }

    /// The job is done with the pipeline.
    mutating func endFill() {
        filling = false
        fillRunning = false
    }

    /// `close()`'s side: takes the token to drop the pipeline on the caller's thread, and marks
    /// the play cancelled. False while a worker holds it (the worker drops it when it is done).
    mutating func claimForClose() -> Bool {
        guard !filling else { return false }
        filling = true
        fillRunning = true
        fillClaim &+= 1
        cancelled = true
        return true
    }

    // MARK: The control side

    /// The play is stopped or replaced: the next play asked, whose resolution goes with it.
    mutating func cancel() -> NextPlay? {
        cancelled = true
        return next
    }

    /// Drops everything encoded ahead and asks the worker to seek.
    mutating func requestSeek(toMS position: Int64) {
        discardEncoded()
        pendingSeekMS = position
    }

    /// The stream URL went stale: drop what was encoded and wait for the re-resolved source.
    mutating func invalidateSource() {
        discardEncoded()
        source = nil
    }

    /// Continues the play from `position` on a freshly resolved source.
    mutating func reopen(with source: ResolvedSource, atMS position: Int64) {
        self.source = source
        pendingReopenMS = position
    }

    /// A source resolved after the play started (a page URL through yt-dlp).
    mutating func provide(_ source: ResolvedSource) {
        self.source = source
    }

    mutating func setVolume(_ volume: Int) {
        self.volume = volume
        renderAgain = true
    }

    mutating func setFilters(_ filters: Filters) {
        self.filters = filters
        renderAgain = true
    }

    mutating func setNormalize(_ normalize: Bool) {
        self.normalize = normalize
        renderAgain = true
    }

    mutating func setCue(_ cue: Bool) {
        self.cue = cue
    }

    /// Asks `next` to follow (nil: nothing); answers the play asked before when it is another,
    /// which is no longer wanted.
    mutating func setNext(_ next: NextPlay?) -> NextPlay? {
        defer { self.next = next }
        guard let previous = self.next, previous.playID != next?.playID else { return nil }
        return previous
    }

    /// The next play's page is resolved.
    mutating func provideNext(_ source: ResolvedSource, playID: UInt64) {
        guard next?.playID == playID else { return }
        next?.source = source
        next?.metadata = source.metadata
    }

    /// The next play cannot be opened: it is dropped, and the pacer says so.
    mutating func failNext(_ error: APIError, playID: UInt64) {
        guard next?.playID == playID, !cancelled else { return }
        next = nil
        items.append(.nextFailed(playID: playID, error))
    }

    /// A layer to mix into the play from its next frame encoded (once its source is resolved).
    mutating func addLayer(_ ask: LayerAsk) {
        layers.append(ask)
    }

    /// A layer's page is resolved.
    mutating func provideLayer(_ source: ResolvedSource, layerID: UInt64) {
        guard let index = layers.firstIndex(where: { $0.layerID == layerID }) else { return }
        layers[index].source = source
    }

    /// A layer is no longer asked for (called off, ran out, failed): the worker drops it. Returns it.
    @discardableResult
    mutating func removeLayer(_ layerID: UInt64) -> LayerAsk? {
        guard let index = layers.firstIndex(where: { $0.layerID == layerID }) else { return nil }
        return layers.remove(at: index)
    }

    /// A layer's page could not be resolved: it ends with the error, in order with the frames.
    mutating func failLayer(_ layerID: UInt64, _ error: APIError) {
        guard !cancelled, removeLayer(layerID) != nil else { return }
        items.append(.layerEnded(layerID, .error, error))
    }

    /// The play failed outside the pipeline (yt-dlp could not resolve it).
    mutating func fail(_ error: APIError) {
        guard !cancelled, !ended else { return }
        ended = true
        items.append(.end(.error, error))
    }

    // MARK: The pacer's side

    /// The oldest item, nil when none is ready.
    mutating func nextItem() -> OutboxItem? {
        guard let item = items.popFirst() else { return nil }
        if case .frame = item { bufferedFrames -= 1 }
        return item
    }

    // MARK: The worker's side

    /// What a fill reads at each step, in one look.
    func fillView() -> FillView {
        FillView(
            bufferedFrames: bufferedFrames, cancelled: cancelled, pendingSeekMS: pendingSeekMS, volume: volume,
            filters: filters, normalize: normalize, generation: generation, renderAgain: renderAgain, next: next,
            layers: layers, cue: cue)
    }

    /// A frame or a marker from the pipeline; dropped when the play was cancelled or the frame
    /// belongs to a generation before a seek (`generation` nil: it belongs to every one).
    mutating func push(_ item: OutboxItem, frames: Int, generation: Int?) {
        guard !cancelled else { return }
        if let generation, generation != self.generation { return }
        if case .end = item { ended = true }
        items.append(item)
        bufferedFrames += frames
    }

    /// The next play is heard from the next frame: it stops being the ask.
    mutating func handOver(to play: NextPlay, info: MediaInfo, passthrough: Bool) {
        guard !cancelled else { return }
        if next?.playID == play.playID { next = nil }
        items.append(.handover(play, info, passthrough: passthrough))
    }

    /// The join is complete: the play before it has ended.
    mutating func previousEnded(playID: UInt64) {
        guard !cancelled else { return }
        items.append(.previousEnded(playID: playID))
    }

    /// The seek asked in `generation` is done (a later one stays pending).
    mutating func seekDone(generation: Int) {
        if self.generation == generation { pendingSeekMS = nil }
    }

    mutating func reopenDone() {
        pendingReopenMS = nil
    }

    /// The source for a pending reopen and where it resumes, once both are known.
    var reopening: (source: ResolvedSource, positionMS: Int64)? {
        guard let pendingReopenMS, let source else { return nil }
        return (source, pendingReopenMS)
    }

    mutating func setPassthroughRefill(at frames: Int?) {
        passthroughRefillAt = frames
    }

    /// The start of a render-again attempt: the run of frames to render, with what, in which
    /// generation. The change counts as taken from here (a change after it asks again).
    mutating func beginRenderAgain() -> (run: Range<UInt64>?, settings: RenderSettings, generation: Int) {
        renderAgain = false
        return (renderedRun, RenderSettings(volume: volume, filters: filters, normalize: normalize), generation)
    }

    /// Puts frames rendered again in place of `run`, if the pacer has taken none of them and no
    /// seek came between.
    mutating func replaceRendered(_ run: Range<UInt64>, generation: Int, with packets: [[UInt8]]) -> Bool {
        guard self.generation == generation, renderedRun == run else { return false }
        var index = items.startIndex
        var next = 0
        while index != items.endIndex, next < packets.count {
            if case .frame(_, let passthrough, let micros, let number) = items[index] {
                items[index] = .frame(packets[next], passthrough: passthrough, sourceMicros: micros, rendered: number)
                next += 1
            }
            index = items.index(after: index)
        }
        return true
    }

    /// Takes the source's own packets waiting back out of the outbox: all but the first (which
    /// the pacer may be about to send), when they are a run of untouched packets at the end and
    /// no join lies among them (packets on both sides of a join belong to two tracks: they go
    /// out as they are, and the change follows them, two frames at most).
    mutating func takeBackPassthrough(generation: Int) -> (previous: [UInt8], packets: [[UInt8]])? {
        guard self.generation == generation, !ended else { return nil }
        var previous: [UInt8]?
        var packets: [[UInt8]] = []
        var kept = CircularBuffer<OutboxItem>(initialCapacity: items.count)
        for item in items {
            guard case .frame(let packet, let passthrough, _, _) = item else {
                if case .handover = item { return nil }
                kept.append(item)
                continue
            }
            guard passthrough else { return nil }
            if previous == nil {
                previous = packet
                kept.append(item)
            } else {
                packets.append(packet)
            }
        }
        guard let previous, !packets.isEmpty else { return nil }
        items = kept
        bufferedFrames -= packets.count
        return (previous, packets)
    }

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
    private mutating func discardEncoded() {
        items = CircularBuffer(
            items.lazy.filter { item in
                switch item {
                case .handover, .previousEnded, .nextFailed, .layerStarted, .layerEnded: true
                default: false
                }
            })
        bufferedFrames = 0
        ended = false
        generation += 1
    }
}

/// One look at a play from the worker's side, and what the worker does next with it.
struct FillView {
    let bufferedFrames: Int
    let cancelled: Bool
    let pendingSeekMS: Int64?
    let volume: Int
    let filters: Filters
    let normalize: Bool
    let generation: Int
    let renderAgain: Bool
    let next: NextPlay?
    var layers: [LayerAsk] = []
    var cue = false

    /// The worker's next step, in this order: stop for a cancelled play; carry out a seek; render
    /// the lead again after a change; stop once the lead is full (`passthroughLead` while
    /// packets pass through); else encode the next frame.
    func step(lead: Int, passthroughLead: Int, passingThrough: Bool) -> FillStep {
        if cancelled { return .stop }
        if let pendingSeekMS { return .seek(toMS: pendingSeekMS) }
        if renderAgain { return .renderAgain }
        return bufferedFrames >= (passingThrough ? passthroughLead : lead) ? .leadFull : .encode
    }
}

enum FillStep: Equatable {
    case stop
    case seek(toMS: Int64)
    case renderAgain
    case leadFull
    case encode
}
