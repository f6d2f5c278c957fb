// What a cluster pair's Router lets its engine play (EngineAPI `Fence`): the sessions named, until
// the time runs out. A value: the manager asks it what to refuse and what to stop, and carries
// that out (SessionManager+Fence).
import EngineAPI
import HTTPTypes
import ServiceSupport
import WireProtocol

struct PlayFence: Sendable {
    let holder: String
    let version: UInt64
    let until: ContinuousClock.Instant
    let sessions: Set<SessionID>
    /// The time ran out and every play was stopped for it.
    var lapsed = false
    /// Plays stopped by this fence.
    var stopped = 0

    init(_ fence: Fence, now: ContinuousClock.Instant) {
        holder = fence.holder
        version = fence.version
        until = now + .milliseconds(fence.validMS)
        sessions = Set(fence.sessions)
    }

    /// Whether `fence` replaces `current`: always, unless both come from one holder and it is
    /// not newer (a fence delivered after a newer one).
    static func replaces(_ fence: Fence, _ current: PlayFence?) -> Bool {
        guard let current, current.holder == fence.holder else { return true }
        return fence.version > current.version
    }

    /// Whether `id` may play at `now`.
    func allows(_ id: SessionID, at now: ContinuousClock.Instant) -> Bool {
        now < until && sessions.contains(id)
    }

    /// Whether the time has run out at `now` and the plays are still to be stopped for it.
    func lapses(at now: ContinuousClock.Instant) -> Bool { !lapsed && now >= until }

    func state(applied: Bool, now: ContinuousClock.Instant) -> FenceState {
        let remaining = max(.zero, until - now)
        return FenceState(
            applied: applied, holder: holder, version: version,
            remainingMS: remaining.components.seconds * 1_000 + remaining.components.attoseconds / 1_000_000_000_000_000,
            sessions: sessions.count, stopped: stopped)
    }

    static let refusal = APIError(
        status: .conflict, code: "fenced",
        message: "this engine's pair cannot prove it owns the session now (its cluster fence does not name it, or has run out)")
}
