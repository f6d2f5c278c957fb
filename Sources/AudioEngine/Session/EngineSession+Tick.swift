// A session's side of a pacer tick, as decisions on the value: what each item its play's worker
// left in the outbox means for the session (its state, position and track), which events go
// into the tick's batch and in what order, and how the tick's deadline is counted. The manager
// walks its sessions and carries out the rest (metrics, logs, refills, closing ended plays).
import EngineAPI
import ServiceSupport
import WireProtocol

/// What one session's tick leaves for the manager to carry out.
struct SessionTick {
    /// How the tick's deadline went for the session (sent, nulled, late).
    var counted = FrameCounters()
    /// The play failed with this error (already in the batch as `error` then `finished`).
    var failed: APIError?
    /// The play ended (ran out, failed): it is off the session, to be closed.
    var ended: Playback?
    /// A transcoded frame went out, and whether it was the last one encoded ahead: the refill
    /// asked for a tick ago had not come back (nearly late; the load governor reads these).
    var transcoded = false
    var tight = false
}

extension EngineSession {
    /// Moves the leading markers and at most one frame of the session's play into the batch,
    /// counts the deadline's outcome, and takes an ended play off the session.
    mutating func tick(
        _ id: SessionID, into batch: inout TickBatch, lateTicks: UInt64, progressInterval: UInt64, wallMS: Int64,
        stuckTicks: UInt64 = .max
    ) -> SessionTick {
        var outcome = SessionTick()
        guard let playback else { return outcome }
        let playing = machine.state
        guard playing == .streaming || playing == .extracting else { return outcome }
        // A hand-over's play waits, primed, for its moment; the play it takes over from ends there.
        if let start = startAtMS {
            guard wallMS >= start else { return outcome }
            startAtMS = nil
        }
        if let handOver, positionMS >= handOver.positionMS || wallMS >= MediaTime.sum(handOver.atMS, 100) {
            handedOver(id, playback, into: &batch)
            outcome.ended = playback
            return outcome
        }
        if playing == .streaming && playStarted { outcome.counted.deficit = lateTicks }
        while true {
            guard let (head, framesLeft) = playback.nextOutboxItemCounted() else {
                if machine.state == .streaming && playStarted { outcome.counted.nulled += 1 }
                break
            }
            switch head {
            case .opened(let info, let passthrough):
                opened(id, playback, info: info, passthrough: passthrough, into: &batch)
                continue  // a marker: the frame, if any, follows it in this tick
            case .frame(let packet, let passthrough, let sourceMicros, _):
                if batch.append(packet, for: id) { outcome.counted.sent = 1 } else { outcome.counted.nulled = 1 }
                if !passthrough {
                    outcome.transcoded = true
                    outcome.tight = framesLeft == 0
                }
                sent(id, passthrough: passthrough, sourceMicros: sourceMicros, progressInterval: progressInterval, into: &batch)
                if let endAt = endAtMS, positionMS >= endAt {
                    // Its end, asked for: as if the track ran out here.
                    playback.cancel()
                    outcome.failed = ended(id, playback, reason: .finished, error: nil, into: &batch)
                    outcome.ended = playback
                }
            case .end(let reason, let error):
                outcome.failed = ended(id, playback, reason: reason, error: error, into: &batch)
                outcome.ended = playback
            case .handover(let next, let info, let passthrough):
                joined(id, next, info: info, passthrough: passthrough, into: &batch)
                continue
            case .previousEnded(let playID):
                if fadingPlayID == playID {
                    fadingPlayID = nil
                    batch.append(SessionManager.finished(id, playID, .finished))
                }
                continue
            case .layerStarted(let layerID):
                if let layer = layers.first(where: { $0.layerID == layerID }) {
                    batch.append(WireEvent(type: .layerStarted, sessionID: id, playID: layer.playID, layerID: layerID))
                }
                continue
            case .layerEnded(let layerID, let reason, let error):
                if let event = endLayer(layerID, id, reason: reason, error: error) { batch.append(event) }
                continue
            case .nextFailed(let playID, let error):
                if nextPlayID == playID { nextPlayID = nil }
                batch.append(WireEvent(type: .error, sessionID: id, playID: playID, code: error.code, message: error.message))
                batch.append(SessionManager.finished(id, playID, .error))
                continue
            }
            break
        }
        counters.add(outcome.counted)
        noteStuck(id, playback, outcome.counted, stuckTicks: stuckTicks, into: &batch)
        return outcome
    }

    /// Counts the deadlines in a row a started, streaming play had no frame for; at `stuckTicks`
    /// of them, once per stall, `stuck`. A frame sent starts the count again.
    private mutating func noteStuck(
        _ id: SessionID, _ playback: Playback, _ counted: FrameCounters, stuckTicks: UInt64, into batch: inout TickBatch
    ) {
        if counted.sent > 0 || machine.state != .streaming || !playStarted {
            ticksWithoutFrame = 0
            return
        }
        guard counted.nulled > 0 else { return }
        ticksWithoutFrame &+= 1
        if ticksWithoutFrame == stuckTicks {
            batch.append(
                WireEvent(
                    type: .stuck, sessionID: id, playID: playback.playID, durationMS: Int64(clamping: stuckTicks &* 20),
                    positionMS: positionMS))
        }
    }

    /// The play's source opened: `ready`, with what is known of the track.
    private mutating func opened(
        _ id: SessionID, _ playback: Playback, info: MediaInfo, passthrough: Bool, into batch: inout TickBatch
    ) {
        guard machine.handle(.opened(playID: playback.playID)) == .emitReady else { return }
        ready(
            id, playback.playID, url: playback.url, info: info, displayName: playback.source?.displayName,
            passthrough: passthrough, into: &batch)
    }

    /// The session's play is heard from the next frame: what is known of its track, and `ready`.
    private mutating func ready(
        _ id: SessionID, _ playID: UInt64, url: String, info: MediaInfo, displayName: String?, passthrough: Bool,
        into batch: inout TickBatch
    ) {
        title = metadata?.title ?? info.title ?? displayName
        durationMS = metadata?.durationMS ?? info.durationMS
        self.passthrough = passthrough
        lastChange = .now
        batch.append(
            WireEvent(
                type: .ready, sessionID: id, playID: playID, url: url, title: title, durationMS: durationMS,
                positionMS: positionMS, volume: volume, passthrough: passthrough,
                artist: info.artist ?? metadata?.uploader))
    }

    /// The next play joined the current one: it is the session's play, `ready` says so, and the
    /// previous one's `finished` follows once its last samples are out.
    private mutating func joined(
        _ id: SessionID, _ next: NextPlay, info: MediaInfo, passthrough: Bool, into batch: inout TickBatch
    ) {
        guard let previous = machine.playID,
            machine.handle(.joined(previous: previous, next: next.playID)) == .emitReady
        else { return }
        fadingPlayID = previous
        if nextPlayID == next.playID { nextPlayID = nil }
        url = next.url
        metadata = next.metadata
        restartPosition(atMS: next.startMS)
        ready(
            id, next.playID, url: next.url, info: info, displayName: next.source?.displayName, passthrough: passthrough,
            into: &batch)
    }

    /// A frame went into the batch: the position moves on, `progress` once a second.
    private mutating func sent(
        _ id: SessionID, passthrough: Bool, sourceMicros: Int, progressInterval: UInt64, into batch: inout TickBatch
    ) {
        playStarted = true
        framesSinceBase += 1
        sourceMicrosSinceBase += Int64(sourceMicros)
        self.passthrough = passthrough
        if (framesSinceBase &+ progressPhase) % max(progressInterval, 1) == 0 {
            batch.append(WireEvent(type: .progress, sessionID: id, playID: machine.playID, positionMS: positionMS))
        }
    }

    /// The play reached its hand-over: `finished`/`stopped` with code `handed_over`, its position
    /// the first one it did not send.
    private mutating func handedOver(_ id: SessionID, _ playback: Playback, into batch: inout TickBatch) {
        playback.cancel()
        guard let stop = stop(id, code: "handed_over") else { return }
        for var event in stop.events {
            if event.playID == stop.playID { event.positionMS = positionMS }
            batch.append(event)
        }
    }

    /// The play ran out or failed: `finished`, or `error` then `finished` (the error returned).
    private mutating func ended(
        _ id: SessionID, _ playback: Playback, reason: FinishReason, error: APIError?, into batch: inout TickBatch
    ) -> APIError? {
        let playID = machine.playID ?? playback.playID
        let input: SessionStateMachine.Input = reason == .finished ? .ended(playID: playID) : .failed(playID: playID)
        var failed: APIError?
        for event in endLayers(id, reason) { batch.append(event) }
        switch machine.handle(input) {
        case .finish:
            batch.append(SessionManager.finished(id, playID, .finished))
        case .fail:
            let error = error ?? APIError.wrap(MediaError(kind: .decodeFailed, message: "the play failed"))
            batch.append(WireEvent(type: .error, sessionID: id, playID: playID, code: error.code, message: error.message))
            batch.append(SessionManager.finished(id, playID, .error))
            failed = error
        default:
            break
        }
        for event in owedEnds(id, reason) { batch.append(event) }
        self.playback = nil
        lastChange = .now
        return failed
    }
}
