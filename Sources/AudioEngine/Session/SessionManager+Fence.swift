// The fence of a cluster pair's engine (EngineAPI `Fence`, PlayFence): set by the Router after
// each renewal of its leases; a play it does not allow is stopped (`finished`/`stopped`, code
// `fenced`), at once when a new fence leaves its session out, on the tick the time runs out
// otherwise.
import EngineAPI
import Logging
import Synchronization
import ServiceSupport
import WireProtocol

extension SessionManager {
    /// Applies `fence` unless a newer one from the same holder came first.
    func setFence(_ fence: Fence) throws(APIError) -> FenceState {
        if let problem = fence.problem { throw .badRequest("invalid_fence", problem) }
        let now = ContinuousClock.now
        var retired: [Playback] = []
        let answer = state.withLock { state -> FenceState in
            guard PlayFence.replaces(fence, state.fence) else {
                return state.fence?.state(applied: false, now: now) ?? FenceState(
                    applied: false, holder: nil, version: nil, remainingMS: nil, sessions: nil, stopped: 0)
            }
            var new = PlayFence(fence, now: now)
            let refused = state.sessions.filter { $0.value.machine.hasActivePlay && !new.allows($0.key, at: now) }.map(\.key)
            for id in refused {
                if let playback = Self.stopFenced(id, &state) { retired.append(playback) }
            }
            new.stopped = refused.count
            new.lapsed = !(now < new.until)
            state.fence = new
            return new.state(applied: true, now: now)
        }
        fills.retire(retired)
        if answer.stopped > 0 {
            logger.warning("fence stopped plays", metadata: ["plays": "\(answer.stopped)", "version": "\(fence.version)"])
        }
        return answer
    }

    /// The fence in force, as `GET /fence` shows it.
    var fenceState: FenceState {
        let now = ContinuousClock.now
        return state.withLock { $0.fence?.state(applied: true, now: now) }
            ?? FenceState(applied: false, holder: nil, version: nil, remainingMS: nil, sessions: nil, stopped: 0)
    }

    /// Refuses a play of `id` the fence does not allow (called with the state locked).
    static func checkFence(_ id: SessionID, _ state: State) throws(APIError) {
        if let fence = state.fence, !fence.allows(id, at: .now) { throw PlayFence.refusal }
    }

    /// On the tick the fence's time runs out: every play is stopped, its events in this tick
    /// (called from `collectTick` with the state locked, before the events are taken).
    static func lapseFence(_ state: inout State, retired: inout [Playback]) -> Int {
        guard let fence = state.fence, fence.lapses(at: .now) else { return 0 }
        let playing = state.sessions.filter { $0.value.machine.hasActivePlay }.map(\.key)
        for id in playing {
            if let playback = stopFenced(id, &state) { retired.append(playback) }
        }
        state.fence?.lapsed = true
        state.fence?.stopped += playing.count
        return playing.count
    }

    /// Stops `id`'s play for the fence: its events wait for the next tick's batch.
    private static func stopFenced(_ id: SessionID, _ state: inout State) -> Playback? {
        guard var session = state.sessions[id], let stop = session.stop(id, code: "fenced") else { return nil }
        stop.stopped?.cancel()
        state.sessions[id] = session
        state.pendingEvents += stop.events
        return stop.stopped
    }
}
