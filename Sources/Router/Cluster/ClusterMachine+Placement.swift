// Where sessions go: a session without a live owner, the orphans of a pair that died or was cut
// off, a pair's share when one joins or comes back, and which plays may move at a moment.
import Foundation
import WireProtocol

extension ClusterMachine {
    enum Placing: Sendable, Equatable {
        /// This pair owns it (its lease is live) at this epoch: take it on here.
        case local(epoch: Int64)
        /// Another pair plays it, at this address.
        case remote(String)
        /// Nobody plays it: give it to this pair.
        case assign(ClusterDatabase.Pair)
        /// It cannot be placed now (a 503 with Retry-After); why, in words.
        case unavailable(String)
    }

    /// Where `id` goes, from its row's ownership (nil: never stored) and the live pairs.
    func placing(_ ownership: ClusterDatabase.Ownership?, pairs: [ClusterDatabase.Pair], for id: SessionID, at now: ContinuousClock.Instant)
        -> Placing
    {
        if let ownership, ownership.live, let owner = ownership.owner {
            if owner == settings.pairID {
                return mayPlay(at: now)
                    ? .local(epoch: ownership.epoch)
                    : .unavailable("this pair cannot renew its leases at the moment; the session moves within seconds")
            }
            if let pair = pairs.first(where: { $0.id == owner }) { return .remote(pair.address) }
            return .unavailable("the pair that plays this session stopped answering; it moves within seconds")
        }
        // An orphan, as `orphanAssignments` sees it: left to its owner's first round while this
        // pair may not yet see whether the owner is back.
        if ownership?.owner != nil, !hasReachedTheDatabaseForALease(at: now) {
            return .unavailable("this pair has just reached the cluster's database again; the session plays within seconds")
        }
        guard let best = LoadScore.best(of: candidates(pairs, at: now), for: id.description) else {
            return .unavailable("every pair of the cluster is full or draining")
        }
        return .assign(best)
    }

    /// Whether this pair's renewals have run without a gap for `pairTimeout`, up to now: long
    /// enough to have seen every pair that reaches the database too as live. A run whose last
    /// renewal is more than `steadyGap` old has broken, though no renewal has yet said so: a pair
    /// whose rounds fail (its database cut off, its round waiting out a stuck statement) must not
    /// place an orphan through a statement that got through meanwhile (2026-11-30: a pair whose
    /// round was still waiting 5.8 s into an outage every pair saw gave two of its own guilds and
    /// two of a neighbour's to the first pair back, through its clients' placements).
    func hasReachedTheDatabaseForALease(at now: ContinuousClock.Instant) -> Bool {
        guard let since = reachingSince, let last = lastRenewal else { return false }
        return now - since >= settings.pairTimeout && now - last <= settings.steadyGap
    }

    /// The pairs a session may be given to: every live one, less this pair while it cannot
    /// prove its leases (it would take a session it may have to stop at once).
    func candidates(_ pairs: [ClusterDatabase.Pair], at now: ContinuousClock.Instant) -> [ClusterDatabase.Pair] {
        mayPlay(at: now) ? pairs : pairs.filter { $0.id != settings.pairID }
    }

    /// Which orphans go where now: each to the pair with the lowest load score, counting each
    /// one given as load for the next, so they spread. This pair gives an orphan to another
    /// only once that pair has left it for three rounds (it may be the next to fail). A pair
    /// that has reached the database for less than `pairTimeout` (it has just started, or is back
    /// from an outage) places none: after an outage every pair saw, the others' sessions are
    /// orphans and the others not yet live, and the first pair back would take them all; their
    /// owners renew them at their own first round instead (2026-11-29's chaos run: 54 of 60
    /// guilds on one pair after the database came back).
    func orphanAssignments(
        _ orphans: [ClusterDatabase.Orphan], pairs live: [ClusterDatabase.Pair], at now: ContinuousClock.Instant
    ) -> [(orphan: ClusterDatabase.Orphan, to: ClusterDatabase.Pair)] {
        guard hasReachedTheDatabaseForALease(at: now) else { return [] }
        var pairs = candidates(live, at: now)
        var assignments: [(orphan: ClusterDatabase.Orphan, to: ClusterDatabase.Pair)] = []
        for orphan in orphans {
            guard let best = LoadScore.best(of: pairs, for: orphan.id.description), let index = pairs.firstIndex(of: best) else { break }
            guard best.id == settings.pairID || orphan.expiredFor > settings.renewEvery * 3 else { continue }
            pairs[index].sessions += 1
            assignments.append((orphan, best))
        }
        return assignments
    }

    /// Where a session goes whose play this pair's engine refused as full: the steady pair with
    /// the lowest load score among those whose engines take plays (not draining, below their
    /// session cap); nil when no other pair has room, and the refusal stands.
    static func room(for id: SessionID, among pairs: [ClusterDatabase.Pair], me: String) -> ClusterDatabase.Pair? {
        LoadScore.best(of: pairs.filter { $0.id != me && $0.admitting && $0.steady }, for: id.description)
    }

    // MARK: Rebalancing

    /// How many sessions to move now, which may go and where (`Rebalancing`); nil: none.
    static func rebalancing(
        owned: [SessionID: ContinuousClock.Instant], pairs: [ClusterDatabase.Pair], me: String, now: ContinuousClock.Instant,
        lastMove: ContinuousClock.Instant? = nil
    ) -> (count: Int, candidates: [SessionID], target: ClusterDatabase.Pair)? {
        Rebalancing.plan(owned: owned, pairs: pairs, me: me, now: now, lastMove: lastMove).map { ($0.count, $0.candidates, $0.target) }
    }

    /// How far ahead a hand-over's moment is set: time for the taking pair's next round (it learns
    /// of the session by renewing its leases, every lease/8) and for its engine to open the track
    /// and encode ahead.
    static let handOverLeadMS: Int64 = 1_500

    /// Whether a session is handed over at an agreed moment rather than at once: it is being
    /// heard, and its track does not end (or fade into the next) before the moment.
    static func mayScheduleHandOver(_ snapshot: SessionSnapshot) -> Bool {
        guard snapshot.queue.status == .playing, snapshot.startAtMS == nil, snapshot.queue.currentTrack != nil else { return false }
        guard let duration = snapshot.queue.currentTrack?.durationMS else { return true }
        return duration - snapshot.positionMS > handOverLeadMS + Int64(snapshot.crossfadeMS) + 1_000
    }
}
