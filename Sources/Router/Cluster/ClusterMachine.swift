// One pair's part in the cluster, as a value: which sessions it owns (at which epoch, since when),
// what it may still play and until when, and what to do with each answer of the database. It
// decides; `ClusterMember` runs the statements, the directory and the engine's fence, as
// `SessionController` runs `SessionMachine`. docs/cluster.md has the argument behind each rule.
import EngineAPI
import Foundation
import WireProtocol

/// Where a session is played.
enum Placement: Sendable, Equatable {
    /// This pair owns it.
    case local
    /// Another pair owns it; its Router answers at this address.
    case remote(String)
}

struct ClusterMachine: Sendable {
    let settings: ClusterSettings

    struct Owned: Sendable, Equatable {
        var epoch: Int64
        /// When this pair came to own it at this epoch (rebalancing leaves recent ones alone).
        var since: ContinuousClock.Instant
    }

    private(set) var owned: [SessionID: Owned] = [:]
    /// When the last statement that proved this pair's leases was sent: its last renewal that
    /// succeeded (or, before the first, the statement that gave it its first session). Every
    /// lease it holds runs at least `lease` past this, by the database's clock.
    private(set) var renewedAt: ContinuousClock.Instant?
    /// The first renewal of the run of renewals this pair is in now, each sent within
    /// `steadyGap` of the one before. Until this pair has reached the database for a lease, it
    /// cannot tell a pair that died from one that was cut off with it and is coming back.
    private(set) var reachingSince: ContinuousClock.Instant?
    private(set) var lastRenewal: ContinuousClock.Instant?
    private(set) var draining = false
    /// Sessions given to another pair at a moment still to come: this engine plays them until
    /// the moment (and the hand-over's end, 300 ms later), so its fence names them until then.
    private(set) var handingOver: [SessionID: ContinuousClock.Instant] = [:]
    private(set) var fences: UInt64 = 0
    private(set) var takeovers: UInt64 = 0
    private var fenceVersion: UInt64 = 0
    /// When each session lately left this pair (let go, handed over): a renewal sent before
    /// that read the row while it was still this pair's, and its answer must not bring it back.
    private var departed: [SessionID: ContinuousClock.Instant] = [:]

    init(settings: ClusterSettings) { self.settings = settings }

    // MARK: What this pair may play

    /// Until when this pair may play what it owns: its leases cannot end before `renewedAt +
    /// lease`, and it stops `fenceMargin` before that (the time the others need to notice).
    var playsUntil: ContinuousClock.Instant? { renewedAt.map { $0 + settings.lease - settings.fenceMargin } }

    /// Whether this pair can prove its leases at `now`.
    func mayPlay(at now: ContinuousClock.Instant) -> Bool { playsUntil.map { now < $0 } ?? false }

    /// Whether this pair still owns `id` at `epoch` and may play it at `now`: what a session
    /// taken on checks again before it plays, after every wait.
    func holds(_ id: SessionID, epoch: Int64, at now: ContinuousClock.Instant) -> Bool {
        owned[id]?.epoch == epoch && mayPlay(at: now)
    }

    /// The fence this pair's engine gets now: what it owns and hands over, for as long as it may
    /// play them. Each one has a higher version than the last.
    mutating func fence(holder: String, at now: ContinuousClock.Instant) -> Fence {
        fenceVersion += 1
        handingOver = handingOver.filter { $0.value > now }
        let sessions = Set(owned.keys).union(handingOver.keys).sorted { $0.description < $1.description }
        let remaining = playsUntil.map { max(.zero, $0 - now) } ?? .zero
        let milliseconds = remaining.components.seconds * 1_000 + remaining.components.attoseconds / 1_000_000_000_000_000
        return Fence(holder: holder, version: fenceVersion, validMS: min(milliseconds, Fence.maxValidMS), sessions: sessions)
    }

    // MARK: What the database answered

    /// A round's renewal, sent at `sent`, answered the sessions this pair owns now. Those it
    /// believed it owned (since before the round) and that are not among them went to another
    /// pair: lost, to be stopped here. Those among them it did not own (at that epoch) were given
    /// to it: to take on (`take`), unless they left it after the round was sent (its answer
    /// read them before they left).
    mutating func renewed(_ rows: [SessionID: Int64], sent: ContinuousClock.Instant) -> (lost: [SessionID], gained: [(SessionID, Int64)]) {
        renewedAt = max(renewedAt ?? sent, sent)
        if let previous = lastRenewal, sent - previous <= settings.steadyGap, reachingSince != nil {
            lastRenewal = max(previous, sent)
        } else {
            reachingSince = sent
            lastRenewal = sent
        }
        departed = departed.filter { $0.value > sent - settings.lease }
        let lost = owned.filter { rows[$0.key] == nil && $0.value.since < sent }.map(\.key).sorted { $0.description < $1.description }
        for id in lost { owned.removeValue(forKey: id) }
        let gained = rows.filter { owned[$0.key]?.epoch != $0.value && departed[$0.key].map { $0 < sent } ?? true }
            .map { ($0.key, $0.value) }.sorted { $0.0.description < $1.0.description }
        return (lost, gained)
    }

    enum Taking: Equatable {
        /// A draining pair takes nothing: the session's lease is to end at once.
        case release
        /// Owned now; `isNew`: it was not before (its controller is to be made and resumed).
        case owned(isNew: Bool)
        /// This pair cannot prove its leases: it takes nothing (the lease runs out, another takes it).
        case refused
    }

    /// `id` was given to this pair at `epoch` by a statement sent at `sent` (a renewal, or an
    /// assignment: its lease runs at least `lease` from then).
    mutating func take(_ id: SessionID, epoch: Int64, sent: ContinuousClock.Instant, now: ContinuousClock.Instant) -> Taking {
        if draining { return .release }
        if renewedAt == nil { renewedAt = sent }
        guard mayPlay(at: now) else { return .refused }
        guard owned[id] == nil else {
            owned[id]?.epoch = epoch
            return .owned(isNew: false)
        }
        owned[id] = Owned(epoch: epoch, since: now)
        takeovers += 1
        return .owned(isNew: true)
    }

    /// `id` leaves this pair at `now` (released when idle, or let go): its ownership, if it had it.
    mutating func remove(_ id: SessionID, at now: ContinuousClock.Instant) -> Owned? {
        departed[id] = now
        return owned.removeValue(forKey: id)
    }

    /// The fence has passed (no renewal for `lease - fenceMargin`): every session this pair owns
    /// is to stop now, before another pair may take it.
    mutating func fenceExpired(at now: ContinuousClock.Instant) -> [SessionID] {
        guard !owned.isEmpty, let until = playsUntil, now >= until else { return [] }
        fences += 1
        defer { owned.removeAll() }
        return owned.keys.sorted { $0.description < $1.description }
    }

    // MARK: Hand-overs

    mutating func startDraining() { draining = true }

    /// `id` was given to another pair at `now`, at a moment whose end is `until`: this engine
    /// plays it until then.
    mutating func handOver(_ id: SessionID, until: ContinuousClock.Instant, at now: ContinuousClock.Instant) {
        owned.removeValue(forKey: id)
        departed[id] = now
        handingOver[id] = until
    }

    mutating func handedOver(_ id: SessionID) { handingOver.removeValue(forKey: id) }
}
