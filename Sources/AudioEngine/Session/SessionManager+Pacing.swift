// The pacer's side of the manager: each tick, the events waiting and one frame per streaming
// session go into the tick's batch, in the order the wire promises (a play's `ready` before its
// first frame, its last frame before its `finished`).
import CoreMetrics
import EngineAPI
import Logging
import NIOConcurrencyHelpers
import ServiceSupport
import Synchronization
import WireProtocol

extension SessionManager {
    /// Appends this tick's events and one frame per streaming session to `batch`, counts late
    /// ticks as deficit, and removes idle sessions. Called from the pacer thread only.
    package func collectTick(into batch: inout TickBatch, lateTicks: UInt64) {
        var refill: [(Playback, UInt64)] = []
        var retired: [Playback] = []
        let refillAt = max(configuration.leadFrames - configuration.refillFrames, 0)
        state.withLock { state in
            for event in state.pendingEvents { batch.append(event) }
            state.pendingEvents.removeAll(keepingCapacity: true)
            state.ticks += 1
            var tickTotals = FrameCounters()
            // Walked by index, in place: `indices` would hold a second reference to the table, so
            // the first update copied every session (profiled: a retain per field per session
            // per tick), and reading `values[index]` would copy one session.
            var index = state.sessions.startIndex
            while index != state.sessions.endIndex {
                defer { index = state.sessions.index(after: index) }
                let id = state.sessions.keys[index]
                guard let playback = state.sessions.values[index].playback else { continue }
                let counted = drain(id, playback, &state.sessions.values[index], into: &batch, lateTicks: lateTicks)
                tickTotals.add(counted)
                if state.sessions.values[index].playback == nil {
                    retired.append(playback)
                } else if let claim = playback.claimFillNumber(refillAt: refillAt) {
                    refill.append((playback, claim))
                }
            }
            state.totals.add(tickTotals)
            if tickTotals.sent > 0 { metrics.framesSent.increment(by: Int64(tickTotals.sent)) }
            if tickTotals.nulled > 0 { metrics.framesNulled.increment(by: Int64(tickTotals.nulled)) }
            if tickTotals.deficit > 0 { metrics.framesDeficit.increment(by: Int64(tickTotals.deficit)) }
            if state.ticks % 50 == 0 { removeIdle(&state, into: &batch, retired: &retired) }
        }
        schedule(claimed: refill, on: workers)
        retire(retired)
    }

    /// Counts ticks the pacer ran at once after the one before because it woke a whole interval
    /// or more late (`TickSchedule.catchUpLimit`).
    func countCaughtUp(ticks: UInt64) { metrics.ticksCaughtUp.increment(by: Int64(clamping: ticks)) }

    /// How many ticks have been collected since the engine started.
    var ticksRun: UInt64 { state.withLock { $0.ticks } }

    /// Moves the leading markers and at most one frame of the session's playback into the batch
    /// and counts the deadline's outcome. An ended play is taken off the session.
    private func drain(
        _ id: SessionID, _ playback: Playback, _ session: inout EngineSession, into batch: inout TickBatch,
        lateTicks: UInt64
    ) -> FrameCounters {
        var counted = FrameCounters()
        let playing = session.machine.state
        guard playing == .streaming || playing == .extracting else { return counted }
        if playing == .streaming && session.playStarted { counted.deficit = lateTicks }
        while true {
            guard let head = playback.nextOutboxItem() else {
                if session.machine.state == .streaming && session.playStarted { counted.nulled += 1 }
                break
            }
            switch head {
            case .opened(let info, let passthrough):
                opened(id, playback, info: info, passthrough: passthrough, &session, into: &batch)
                continue  // a marker: the frame, if any, follows it in this tick
            case .frame(let packet, let passthrough, let sourceMicros, _):
                if batch.append(packet, for: id) { counted.sent = 1 } else { counted.nulled = 1 }
                sent(id, playback, passthrough: passthrough, sourceMicros: sourceMicros, &session, into: &batch)
            case .end(let reason, let error):
                ended(id, playback, reason: reason, error: error, &session, into: &batch)
            case .handover(let next, let info, let passthrough):
                joined(id, next, info: info, passthrough: passthrough, &session, into: &batch)
                continue
            case .previousEnded(let playID):
                if session.fadingPlayID == playID {
                    session.fadingPlayID = nil
                    batch.append(Self.finished(id, playID, .finished))
                }
                continue
            case .nextFailed(let playID, let error):
                if session.nextPlayID == playID { session.nextPlayID = nil }
                batch.append(WireEvent(type: .error, sessionID: id, playID: playID, code: error.code, message: error.message))
                batch.append(Self.finished(id, playID, .error))
                continue
            }
            break
        }
        session.counters.add(counted)
        return counted
    }

    /// The play's source opened: `ready`, with what is known of the track.
    private func opened(
        _ id: SessionID, _ playback: Playback, info: MediaInfo, passthrough: Bool, _ session: inout EngineSession,
        into batch: inout TickBatch
    ) {
        guard session.machine.handle(.opened(playID: playback.playID)) == .emitReady else { return }
        ready(
            id, playback.playID, url: playback.url, info: info,
            displayName: playback.source?.displayName, passthrough: passthrough, &session,
            into: &batch)
    }

    /// The session's play is heard from the next frame: what is known of its track, and `ready`.
    private func ready(
        _ id: SessionID, _ playID: UInt64, url: String, info: MediaInfo, displayName: String?, passthrough: Bool,
        _ session: inout EngineSession, into batch: inout TickBatch
    ) {
        session.title = session.metadata?.title ?? info.title ?? displayName
        session.durationMS = session.metadata?.durationMS ?? info.durationMS
        session.passthrough = passthrough
        session.lastChange = .now
        batch.append(
            WireEvent(
                type: .ready, sessionID: id, playID: playID, url: url, title: session.title,
                durationMS: session.durationMS, positionMS: session.positionMS, volume: session.volume,
                passthrough: passthrough))
    }

    /// The next play joined the current one: it is the session's play, `ready` says so, and the
    /// previous one's `finished` follows once its last samples are out.
    private func joined(
        _ id: SessionID, _ next: NextPlay, info: MediaInfo, passthrough: Bool, _ session: inout EngineSession,
        into batch: inout TickBatch
    ) {
        guard let previous = session.machine.playID,
            session.machine.handle(.joined(previous: previous, next: next.playID)) == .emitReady
        else { return }
        session.fadingPlayID = previous
        if session.nextPlayID == next.playID { session.nextPlayID = nil }
        session.url = next.url
        session.metadata = next.metadata
        session.positionBaseMS = 0
        session.framesSinceBase = 0
        session.sourceMicrosSinceBase = 0
        ready(
            id, next.playID, url: next.url, info: info, displayName: next.source?.displayName, passthrough: passthrough,
            &session, into: &batch)
    }

    /// A frame went into the batch: the position moves on, `progress` once a second.
    private func sent(
        _ id: SessionID, _ playback: Playback, passthrough: Bool, sourceMicros: Int, _ session: inout EngineSession,
        into batch: inout TickBatch
    ) {
        session.playStarted = true
        session.framesSinceBase += 1
        session.sourceMicrosSinceBase += Int64(sourceMicros)
        session.passthrough = passthrough
        if (session.framesSinceBase &+ session.progressPhase) % max(configuration.progressInterval, 1) == 0 {
            batch.append(
                WireEvent(type: .progress, sessionID: id, playID: session.machine.playID, positionMS: session.positionMS))
        }
    }

    /// The play ran out or failed: `finished`, or `error` then `finished`.
    private func ended(
        _ id: SessionID, _ playback: Playback, reason: FinishReason, error: APIError?, _ session: inout EngineSession,
        into batch: inout TickBatch
    ) {
        let playID = session.machine.playID ?? playback.playID
        let input: SessionStateMachine.Input = reason == .finished ? .ended(playID: playID) : .failed(playID: playID)
        switch session.machine.handle(input) {
        case .finish:
            batch.append(Self.finished(id, playID, .finished))
        case .fail:
            let error = error ?? APIError.wrap(MediaError(kind: .decodeFailed, message: "the play failed"))
            batch.append(WireEvent(type: .error, sessionID: id, playID: playID, code: error.code, message: error.message))
            batch.append(Self.finished(id, playID, .error))
            metrics.sourceErrors.increment()
            logger.warning(
                "play failed", metadata: ["session.id": "\(id)", "play.id": "\(playback.playID)", "error": "\(error)"])
        default:
            break
        }
        for event in session.owedEnds(id, reason) { batch.append(event) }
        session.playback = nil
        session.lastChange = .now
    }

    /// Sessions left stopped, finished, errored or paused past the idle timeout go.
    private func removeIdle(_ state: inout State, into batch: inout TickBatch, retired: inout [Playback]) {
        let now = ContinuousClock.now
        var removed: [SessionID] = []
        for index in state.sessions.indices {
            let id = state.sessions.keys[index]
            guard now - state.sessions.values[index].lastChange >= configuration.idleTimeout else { continue }
            guard case .remove(let playID) = state.sessions.values[index].machine.handle(.idleTimeout) else { continue }
            if let playID {
                state.sessions.values[index].playback?.cancel()
                if let playback = state.sessions.values[index].playback { retired.append(playback) }
                batch.append(Self.finished(id, playID, .cleanup))
                for event in state.sessions.values[index].owedEnds(id, .cleanup) { batch.append(event) }
            }
            removed.append(id)
        }
        for id in removed {
            state.sessions.removeValue(forKey: id)
            logger.info("idle session removed", metadata: ["session.id": "\(id)"])
        }
    }
}
