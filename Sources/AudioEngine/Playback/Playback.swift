// One play of one session: its decisions (`PlaybackMachine`) behind a lock that the control
// thread, the pacer and the worker holding the fill token share, and the worker's side
// (`PlaybackWorker`) that carries them out on the pipeline. The pacer drains one frame per tick.
import EngineAPI
import NIOConcurrencyHelpers
import ServiceSupport
import WireProtocol

/// A single play on a session. Frames are produced by worker threads and consumed by the pacer.
///
/// `@unchecked Sendable`: the machine is behind a lock; the worker (and the pipeline it owns) is
/// touched only by the one job that holds the fill token (`PlaybackMachine.filling`), so never
/// concurrently.
final class Playback: @unchecked Sendable {
    let sessionID: SessionID
    let playID: UInt64
    let url: String
    let startMS: Int64
    /// A pthread mutex (NIO's), not `Synchronization.Mutex`: the pacer and a worker contend for it
    /// every tick, and ThreadSanitizer cannot see the Mutex's contended futex path (it reported
    /// the locked accesses as races).
    let machine: NIOLockedValueBox<PlaybackMachine>
    /// Fires when the play is stopped or replaced: work done for it elsewhere (yt-dlp resolving
    /// its page) is cancelled with it.
    let cancellation = CancellationSignal()
    /// Owned by the job holding the fill token.
    private let worker: PlaybackWorker

    init(
        sessionID: SessionID, playID: UInt64, url: String, startMS: Int64, volume: Int, filters: Filters = Filters(),
        normalize: Bool = false, cue: Bool = false, loudnessTarget: Double = LoudnessNormalizer.defaultTarget,
        source: ResolvedSource?
    ) {
        self.sessionID = sessionID
        self.playID = playID
        self.url = url
        self.startMS = startMS
        machine = NIOLockedValueBox(PlaybackMachine(volume: volume, filters: filters, normalize: normalize, cue: cue, source: source))
        worker = PlaybackWorker(machine: machine, playID: playID, startMS: startMS, loudnessTarget: loudnessTarget)
    }

    /// Takes the fill token if the outbox holds at most `refillAt` frames (the passthrough
    /// threshold while packets pass through) and there is work.
    func claimFill(refillAt: Int) -> Bool { claimFillNumber(refillAt: refillAt) != nil }

    /// `claimFill`, returning the claim's number for the job to carry to `fill(claim:)`.
    func claimFillNumber(refillAt: Int) -> UInt64? {
        machine.withLockedValue { $0.claimFill(refillAt: refillAt) }
    }

    /// A change's side: claims the fill token, or takes it over from a job a tick queued that has
    /// not started yet (that job, when its turn comes, finds its claim gone and leaves the play
    /// alone). The change is then rendered on the caller's thread pool at once instead of behind
    /// the tick's queue of refills. Nil while a fill is running (it reads the change as it goes).
    func claimOrTakeOverFill() -> UInt64? {
        machine.withLockedValue { $0.claimOrTakeOverFill() }
    }

    func cancel() {
        let (next, layers) = machine.withLockedValue { ($0.cancel(), $0.layers) }
        cancellation.fire()
        next?.cancellation.fire()
        for layer in layers { layer.cancellation.fire() }
    }

    /// Closes the source of a cancelled or ended play (FFmpeg contexts, the read-ahead thread).
    /// Call on a thread that may block; if a worker holds the pipeline, it closes it instead.
    func close() {
        guard machine.withLockedValue({ $0.claimForClose() }) else { return }
        worker.closePipeline()
        machine.withLockedValue { $0.endFill() }
    }

    /// Hands over a source resolved after the play started (a page URL through yt-dlp).
    func provide(_ source: ResolvedSource) {
        machine.withLockedValue { $0.provide(source) }
    }

    /// Drops everything encoded ahead and asks the worker to seek (the control thread's side).
    func requestSeek(toMS position: Int64) {
        machine.withLockedValue { $0.requestSeek(toMS: position) }
    }

    /// The stream URL went stale during a long pause: drop what was encoded and wait for the
    /// re-resolved source (`reopen(with:atMS:)`).
    func invalidateSource() {
        machine.withLockedValue { $0.invalidateSource() }
    }

    /// Continues the play from `position` on a freshly resolved source.
    func reopen(with source: ResolvedSource, atMS position: Int64) {
        machine.withLockedValue { $0.reopen(with: source, atMS: position) }
    }

    /// The source the play is using (or will use).
    var source: ResolvedSource? { machine.withLockedValue { $0.source } }

    func setVolume(_ volume: Int) {
        machine.withLockedValue { $0.setVolume(volume) }
    }

    func setFilters(_ filters: Filters) {
        machine.withLockedValue { $0.setFilters(filters) }
    }

    func setNormalize(_ normalize: Bool) {
        machine.withLockedValue { $0.setNormalize(normalize) }
    }

    func setCue(_ cue: Bool) {
        machine.withLockedValue { $0.setCue(cue) }
    }

    /// Plays `next` after the current track (nil: nothing follows); the play asked before, if
    /// another, is no longer wanted.
    func setNext(_ next: NextPlay?) {
        machine.withLockedValue { $0.setNext(next) }?.cancellation.fire()
    }

    /// Hands over the source of the next play once its page is resolved.
    func provideNext(_ source: ResolvedSource, playID: UInt64) {
        machine.withLockedValue { $0.provideNext(source, playID: playID) }
    }

    /// The next play's page could not be resolved.
    func failNext(_ error: any Error, playID: UInt64) {
        machine.withLockedValue { $0.failNext(APIError.wrap(error), playID: playID) }
    }

    /// Mixes a layer into the play from its next frame encoded.
    func addLayer(_ ask: LayerAsk) {
        machine.withLockedValue { $0.addLayer(ask) }
    }

    /// Hands over a layer's source once its page is resolved.
    func provideLayer(_ source: ResolvedSource, layerID: UInt64) {
        machine.withLockedValue { $0.provideLayer(source, layerID: layerID) }
    }

    /// A layer's page could not be resolved.
    func failLayer(_ layerID: UInt64, _ error: any Error) {
        machine.withLockedValue { $0.failLayer(layerID, APIError.wrap(error)) }
    }

    /// Calls a layer off: the worker drops it at its next frame.
    func removeLayer(_ layerID: UInt64) {
        machine.withLockedValue { $0.removeLayer(layerID) }?.cancellation.fire()
    }

    /// Ends the play with an error that happened outside the pipeline (yt-dlp could not resolve it).
    func fail(_ error: any Error) {
        machine.withLockedValue { $0.fail(APIError.wrap(error)) }
    }

    /// Takes the oldest item of the outbox (the pacer's side), nil when none is ready.
    func nextOutboxItem() -> OutboxItem? {
        machine.withLockedValue { $0.nextItem() }
    }

    /// The same, with the frames left in the outbox after it (what the pacer's slack is read from).
    func nextOutboxItemCounted() -> (item: OutboxItem, framesLeft: Int)? {
        machine.withLockedValue { machine in machine.nextItem().map { ($0, machine.bufferedFrames) } }
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
        network: SourceNetwork?, render: RenderContext? = nil, claim: UInt64? = nil, perVisit: Int = .max
    ) {
        guard machine.withLockedValue({ $0.startFill(claim: claim) }) else { return }
        defer {
            // A cancelled play closes its source here, on a worker thread, never on the pacer's.
            if machine.withLockedValue({ $0.cancelled }) { worker.closePipeline() }
            machine.withLockedValue { $0.endFill() }
        }
        worker.fill(
            lead: lead, passthroughLead: passthroughLead,
            context: .init(encoder: configuration, metrics: metrics, network: network, render: render, perVisit: perVisit))
    }

    /// Tries at rendering the lead again before the change is left to follow it (each attempt
    /// takes a lead's encodes; the pacer takes a frame every 20 ms).
    static let renderAgainAttempts = 4

    /// Tests only: runs between rendering the lead again and putting it in the outbox, where
    /// the pacer may take a frame.
    var afterRenderingAgain: (() -> Void)? {
        get { worker.afterRenderingAgain }
        set { worker.afterRenderingAgain = newValue }
    }
}
