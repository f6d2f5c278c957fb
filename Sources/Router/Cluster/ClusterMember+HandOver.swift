// Sessions leaving a pair that plays on: every one on a drain (SIGTERM, `POST
// /api/cluster/drain`), a share of them to a pair that joined or came back (rebalancing). A
// session being heard moves at an agreed moment, so nobody hears the move; any other goes at once.
import EngineAPI
import Foundation
import Logging
import ServiceSupport
import Synchronization
import WireProtocol

extension ClusterMember {
    static let handOverLeadMS = ClusterMachine.handOverLeadMS

    static func rebalancing(
        owned: [SessionID: ContinuousClock.Instant], pairs: [ClusterDatabase.Pair], me: String, now: ContinuousClock.Instant,
        lastMove: ContinuousClock.Instant? = nil
    ) -> (count: Int, candidates: [SessionID], target: ClusterDatabase.Pair)? {
        ClusterMachine.rebalancing(owned: owned, pairs: pairs, me: me, now: now, lastMove: lastMove)
    }

    /// Hands every session this pair owns to the others, and takes no new ones. A session being
    /// heard goes at an agreed moment `handOverLeadMS` ahead (`scheduleMoves`); any other
    /// (paused, idle, near its track's end) is stored as of now and its lease ended at once, for
    /// the others' next round. Answers how many were handed over.
    @discardableResult
    func handOver() async -> Int {
        machine.withLock { $0.startDraining() }
        try? await database.heartbeat(heartbeat)
        let pairs = ((try? await database.livePairs(within: settings.pairTimeout, steadyFor: settings.lease)) ?? [])
            .filter { $0.id != settings.pairID }
        let owned = machine.withLock { Array($0.owned.keys) }
        let moving = await scheduleMoves(owned, to: pairs)
        // The rest the quick way: the database first, for every session (a few ms each), then the
        // engine: an engine being stopped too may answer slowly or not at all, and must not hold
        // the hand-over.
        var handed = moving.letGo
        for id in owned where !moving.ids.contains(id) && !moving.letGo.contains(id) {
            if await letGo(id) { handed.append(id) }
        }
        if let directory {
            await withDiscardingTaskGroup { group in
                for id in handed { group.addTask { await directory.drop(id) } }
            }
        }
        await finishMoves(moving)
        let total = handed.count + moving.ids.count
        if total > 0 {
            logger.notice(
                "handed this pair's sessions to the others", metadata: ["sessions": "\(total)", "at.moment": "\(moving.ids.count)"])
        }
        return total
    }

    /// This pair's engine refused a play of `id` as full: the session goes, as `snapshot` (its
    /// queue at the track and position the play was for), to a pair with room
    /// (`ClusterMachine.room`), which takes it on at its next round, or when one of the
    /// session's clients reaches it, and plays it from there as after a failover. The clients
    /// here are moved once the caller has had its answer (`handOverEnd`). Answers false, the
    /// session staying here, when no pair has room or the database does not answer.
    func moveForRoom(_ id: SessionID, _ snapshot: SessionSnapshot) async -> Bool {
        guard let ownership = machine.withLock({ $0.owned[id] }),
            let pairs = try? await database.livePairs(within: settings.pairTimeout, steadyFor: settings.lease),
            let target = ClusterMachine.room(for: id, among: pairs, me: settings.pairID),
            let json = try? JSONCoding.encoder.encode(snapshot),
            let epoch = try? await database.transfer(
                id, epoch: ownership.epoch, to: target.id, lease: settings.lease, snapshot: String(decoding: json, as: UTF8.self))
        else { return false }
        machine.withLock { _ = $0.remove(id, at: .now) }
        await pushFence()
        logger.notice(
            "this pair's engine is full: a session's play went to a pair with room",
            metadata: ["session.id": "\(id)", "to": "\(target.id)", "epoch": "\(epoch)", "position.ms": "\(snapshot.positionMS)"])
        if let directory {
            await directory.detach(id)
            Task {
                try? await Task.sleep(for: Self.handOverEnd)
                await directory.finishHandOver(id)
            }
        }
        return true
    }

    /// Sessions given to other pairs at a moment still to come, and those let go instead.
    struct Moves: Sendable {
        var ids: [SessionID] = []
        var atMS: Int64 = 0
        /// Their engine's play was to end at the moment, but the row could not be given: they
        /// were stored and their lease ended; their plays here are still to stop (`drop`).
        var letGo: [SessionID] = []
    }

    /// Stores `id`'s snapshot as of now and ends its lease (the others take it at their next
    /// round); answers whether this pair still owned it. Its play here is the caller's to stop.
    private func letGo(_ id: SessionID) async -> Bool {
        guard let ownership = machine.withLock({ $0.owned[id] }) else { return false }
        if let snapshot = await directory?.checkpoint(id), let json = try? JSONCoding.encoder.encode(snapshot) {
            _ = try? await database.store(
                id, json: String(decoding: json, as: UTF8.self), active: snapshot.isActive, epoch: ownership.epoch)
        }
        guard machine.withLock({ $0.remove(id, at: .now) }) != nil else { return false }
        try? await database.release(id, epoch: ownership.epoch)
        return true
    }

    /// Gives each of `ids` that is being heard to the pair of `pairs` with the lowest load score,
    /// at one moment `handOverLeadMS` ahead: this pair's engine answers where its play will be
    /// then and sends nothing after; the row names the taking pair, the position and the moment;
    /// that pair's engine opens the track there ahead of time and sends its first frame at the
    /// moment. The clients here hear this engine until then (`finishMoves`), and its fence names
    /// the session until then. A session that is not being heard, or whose track ends (or fades
    /// into the next) before the moment, is left; at most `limit` are moved.
    private func scheduleMoves(_ ids: [SessionID], to candidates: [ClusterDatabase.Pair], limit: Int = .max) async -> Moves {
        var pairs = candidates
        var moves = Moves(atMS: SessionDirectory.wallClockMS() + Self.handOverLeadMS)
        guard let directory else { return moves }
        let end = SessionDirectory.instant(ofWallClockMS: moves.atMS) + Self.handOverEnd
        for id in ids where moves.ids.count < limit {
            guard let ownership = machine.withLock({ $0.owned[id] }), let current = await directory.checkpoint(id),
                ClusterMachine.mayScheduleHandOver(current), let best = LoadScore.best(of: pairs, for: id.description),
                let index = pairs.firstIndex(of: best), let point = await directory.scheduleHandOver(id, atMS: moves.atMS)
            else { continue }
            var moving = current
            moving.positionMS = point.positionMS
            moving.startAtMS = point.atMS
            let given: Int64?
            if let json = try? JSONCoding.encoder.encode(moving) {
                given = (try? await database.transfer(
                    id, epoch: ownership.epoch, to: best.id, lease: settings.lease, snapshot: String(decoding: json, as: UTF8.self))) ?? nil
            } else {
                given = nil
            }
            guard let given else {
                // Not given (the database did not answer): this engine would stop at the moment
                // with nobody to go on, so the session goes the quick way now.
                if await letGo(id) { moves.letGo.append(id) }
                continue
            }
            machine.withLock { $0.handOver(id, until: end, at: .now) }
            await directory.detach(id)
            pairs[index].sessions += 1
            moves.ids.append(id)
            logger.info(
                "hand-over scheduled",
                metadata: ["session.id": "\(id)", "to": "\(best.id)", "epoch": "\(given)", "position.ms": "\(point.positionMS)"])
        }
        return moves
    }

    /// How long after a hand-over's moment its clients are moved at the latest (an engine that
    /// never says its play ended).
    static let handOverEnd: Duration = .milliseconds(300)

    /// Waits out the moves' moment: each session's clients move once its last frame here is out
    /// (the engine's `finished`/`handed_over`); this is for an engine that never says so.
    private func finishMoves(_ moves: Moves) async {
        guard !moves.ids.isEmpty, let directory else { return }
        try? await Task.sleep(until: SessionDirectory.instant(ofWallClockMS: moves.atMS) + Self.handOverEnd)
        for id in moves.ids {
            machine.withLock { $0.handedOver(id) }
            await directory.finishHandOver(id)
        }
    }

    /// Looks for an imbalance once a lease; never in the rounds themselves, which must renew the
    /// leases while the moves wait for their moment.
    func rebalanceLoop() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: settings.lease)
            guard !Task.isCancelled,
                let pairs = try? await database.livePairs(within: settings.pairTimeout, steadyFor: settings.lease)
            else { continue }
            await rebalance(with: pairs)
        }
    }

    /// One rebalancing step: moves sessions to the pair `Rebalancing` picks while the rounds go
    /// on (the moves' moment is 1.5 s ahead). A pair that cannot prove its leases moves nothing.
    private func rebalance(with pairs: [ClusterDatabase.Pair]) async {
        let (owned, ready) = machine.withLock { ($0.owned.mapValues(\.since), !$0.draining && $0.mayPlay(at: .now)) }
        guard ready,
            let plan = ClusterMachine.rebalancing(
                owned: owned, pairs: pairs, me: settings.pairID, now: .now, lastMove: lastRebalance.withLock { $0 })
        else { return }
        let moves = await scheduleMoves(plan.candidates, to: [plan.target], limit: plan.count)
        if let directory {
            for id in moves.letGo { await directory.drop(id) }
        }
        guard !moves.ids.isEmpty else { return }
        lastRebalance.withLock { $0 = .now }
        logger.notice("moving sessions to a less loaded pair", metadata: ["sessions": "\(moves.ids.count)", "to": "\(plan.target.id)"])
        await finishMoves(moves)
    }
}
