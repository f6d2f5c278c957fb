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
        let refillAt = max(render.lead - configuration.refillFrames, 0)
        let wallMS = Self.wallClockMS()
        var fenced = 0
        state.withLock { state in
            fenced = Self.lapseFence(&state, retired: &retired)
            for event in state.pendingEvents { batch.append(event) }
            state.pendingEvents.removeAll(keepingCapacity: true)
            state.ticks += 1
            var tickTotals = FrameCounters()
            var transcoded: UInt64 = 0, tight: UInt64 = 0
            // Walked by index, in place: `indices` would hold a second reference to the table, so
            // the first update copied every session (profiled: a retain per field per session
            // per tick), and reading `values[index]` would copy one session.
            var index = state.sessions.startIndex
            while index != state.sessions.endIndex {
                defer { index = state.sessions.index(after: index) }
                let id = state.sessions.keys[index]
                guard let playback = state.sessions.values[index].playback else { continue }
                let tick = state.sessions.values[index].tick(
                    id, into: &batch, lateTicks: lateTicks, progressInterval: configuration.progressInterval, wallMS: wallMS,
                    stuckTicks: configuration.stuckTicks)
                tickTotals.add(tick.counted)
                if tick.transcoded { transcoded += 1 }
                if tick.tight { tight += 1 }
                if let ended = tick.ended {
                    retired.append(ended)
                    if let error = tick.failed { failed(id, ended, error) }
                } else if let claim = playback.claimFillNumber(refillAt: refillAt) {
                    refill.append((playback, claim))
                }
            }
            state.totals.add(tickTotals)
            state.transcodedFrames &+= transcoded
            state.tightFrames &+= tight
            if tickTotals.sent > 0 { metrics.framesSent.increment(by: Int64(tickTotals.sent)) }
            if tickTotals.nulled > 0 { metrics.framesNulled.increment(by: Int64(tickTotals.nulled)) }
            if tickTotals.deficit > 0 { metrics.framesDeficit.increment(by: Int64(tickTotals.deficit)) }
            if state.ticks % 50 == 0 { removeIdle(&state, into: &batch, retired: &retired) }
        }
        fills.schedule(claimed: refill, on: .workers)
        fills.retire(retired)
        if fenced > 0 { logger.warning("the fence's time ran out; plays stopped", metadata: ["plays": "\(fenced)"]) }
    }

    /// Counts ticks the pacer ran at once after the one before because it woke a whole interval
    /// or more late (`TickSchedule.catchUpLimit`).
    func countCaughtUp(ticks: UInt64) { metrics.ticksCaughtUp.increment(by: Int64(clamping: ticks)) }

    /// How many ticks have been collected since the engine started.
    var ticksRun: UInt64 { state.withLock { $0.ticks } }

    /// A play failed mid-tick: its `error` and `finished` are in the batch; count and log it.
    private func failed(_ id: SessionID, _ playback: Playback, _ error: APIError) {
        metrics.sourceErrors.increment()
        logger.warning("play failed", metadata: ["session.id": "\(id)", "play.id": "\(playback.playID)", "error": "\(error)"])
    }

    /// Sessions left stopped, finished, errored or paused past the idle timeout go.
    private func removeIdle(_ state: inout State, into batch: inout TickBatch, retired: inout [Playback]) {
        let now = ContinuousClock.now
        var removed: [SessionID] = []
        for index in state.sessions.indices {
            // Read before anything is changed: `indices` holds a second reference to the table, so
            // a mutating call on a session that stays would copy every session once a second.
            guard now - state.sessions.values[index].lastChange >= configuration.idleTimeout else { continue }
            let id = state.sessions.keys[index]
            guard let expired = state.sessions.values[index].expire(id, now: now, idleTimeout: configuration.idleTimeout)
            else { continue }
            if let playback = expired.ended {
                playback.cancel()
                retired.append(playback)
            }
            for event in expired.events { batch.append(event) }
            removed.append(id)
        }
        for id in removed {
            state.sessions.removeValue(forKey: id)
            logger.info("idle session removed", metadata: ["session.id": "\(id)"])
        }
    }
}
