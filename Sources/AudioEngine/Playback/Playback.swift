// One play of one session: its source pipeline, and the outbox of encoded frames and in-band
// events the pacer drains one frame per tick.
import NIOCore
import Synchronization
import WireProtocol

/// What the pacer finds at the head of a playback's outbox.
enum OutboxItem {
    case event(WireEvent)
    case frame([UInt8])
    /// The play is over; the pacer emits `finished` with this reason (and `error` first, if any).
    case end(FinishReason, ControlError?)
}

/// A single play on a session. Frames are produced by worker threads and consumed by the pacer.
///
/// `@unchecked Sendable`: the mutable outbox is behind a `Mutex`; `pipeline` is touched only by
/// the one worker job that holds the fill token (`Outbox.filling`), so never concurrently.
final class Playback: @unchecked Sendable {
    struct Outbox {
        var items = CircularBuffer<OutboxItem>(initialCapacity: 8)
        var bufferedFrames = 0
        /// A worker job owns the pipeline while this is set.
        var filling = false
        var cancelled = false
        /// The end item has been queued; no more work for the workers.
        var ended = false
        /// At least one frame went out: from then on a missing frame counts as nulled.
        var started = false
    }

    let sessionID: SessionID
    let playID: UInt64
    let url: String
    let source: ResolvedSource
    let outbox = Mutex(Outbox())
    let counters = Mutex(FrameCounters())

    /// Owned by the worker holding the fill token.
    var pipeline: Pipeline?

    init(sessionID: SessionID, playID: UInt64, url: String, source: ResolvedSource) {
        self.sessionID = sessionID
        self.playID = playID
        self.url = url
        self.source = source
    }

    /// Takes the fill token if the outbox is below `refillAt` frames and the play still needs work.
    func claimFill(refillAt: Int) -> Bool {
        outbox.withLock { box in
            guard !box.filling, !box.cancelled, !box.ended, box.bufferedFrames <= refillAt else { return false }
            box.filling = true
            return true
        }
    }

    /// Marks the play cancelled; workers stop at their next frame.
    func cancel() {
        outbox.withLock { $0.cancelled = true }
    }

    /// Worker side: opens the pipeline if needed and encodes frames until `lead` are buffered.
    /// Must be called holding the fill token; releases it.
    func fill(lead: Int, encoder configuration: OpusEncoderConfiguration) {
        defer { outbox.withLock { $0.filling = false } }
        if pipeline == nil {
            do {
                let opened = try Pipeline(source: source, encoder: configuration)
                pipeline = opened
                let ready = WireEvent(
                    type: .ready, sessionID: sessionID, playID: playID, url: url,
                    title: opened.info.title ?? source.displayName, durationMS: opened.info.durationMS,
                    passthrough: false)
                push(.event(ready), frames: 0)
            } catch {
                push(.end(.error, ControlError.wrap(error)), frames: 0)
                return
            }
        }
        guard let pipeline else { return }
        while true {
            let (buffered, stop) = outbox.withLock { ($0.bufferedFrames, $0.cancelled) }
            if stop || buffered >= lead { return }
            do {
                guard let packet = try pipeline.nextPacket() else {
                    push(.end(.finished, nil), frames: 0)
                    return
                }
                push(.frame(packet), frames: 1)
            } catch {
                push(.end(.error, ControlError.wrap(error)), frames: 0)
                return
            }
        }
    }

    private func push(_ item: OutboxItem, frames: Int) {
        outbox.withLock { box in
            guard !box.cancelled else { return }
            if case .end = item { box.ended = true }
            box.items.append(item)
            box.bufferedFrames += frames
        }
    }
}

/// Frames of one play (or of the whole engine) the way operators count them.
public struct FrameCounters: Sendable, Equatable, Codable {
    /// Frames written at their deadline.
    public var sent: UInt64 = 0
    /// Deadlines at which a streaming session had no frame ready.
    public var nulled: UInt64 = 0
    /// Deadlines the pacer itself missed (the whole process was late).
    public var deficit: UInt64 = 0
}
