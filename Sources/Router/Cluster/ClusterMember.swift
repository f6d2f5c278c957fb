// One pair's membership of a cluster: its heartbeat, the leases of the sessions it owns, their
// placement, and the fence that stops it playing what it can no longer prove it owns.
//
// Every `renewEvery` the pair writes its heartbeat, renews every lease it holds in one statement,
// picks up the sessions given to it meanwhile, lets go of those given to another pair, and hands
// each orphan (an active session whose lease ran out: its pair died or was cut off) to the pair
// with the lowest load score. A pair whose last successful renewal was sent more than
// `lease - fenceMargin` ago stops every play it holds: by then another pair may be about to take
// them, and no guild is ever heard from two pairs at once. docs/cluster.md has the timings.
import EngineAPI
import Foundation
import HTTPTypes
import Logging
import PostgresNIO
import ServiceLifecycle
import ServiceSupport
import Synchronization
import WireProtocol

/// Where a session is played.
enum Placement: Sendable, Equatable {
    /// This pair owns it.
    case local
    /// Another pair owns it; its Router answers at this address.
    case remote(String)
}

/// The cluster settings of a pair (TONEARM_DATABASE_URL and its companions).
struct ClusterSettings: Sendable {
    var databaseURL: String
    /// This pair's name, unique in the cluster.
    var pairID: String
    /// Where the other pairs' Routers reach this one (http://host:port).
    var address: String
    /// The most sessions placement gives this pair.
    var maxSessions: Int = 60
    /// How long a lease runs unrenewed before another pair may take its session.
    var lease: Duration = .seconds(3)

    var renewEvery: Duration { lease / 8 }
    /// A pair stops playing its sessions this long before their leases could end.
    var fenceMargin: Duration { lease / 3 }
    /// A pair not heard from for this long is not offered sessions.
    var pairTimeout: Duration { lease }
}

final class ClusterMember: Service, Sendable {
    let settings: ClusterSettings
    let database: ClusterDatabase
    private let logger: Logger
    private let state = Mutex(State())
    /// The directory, set once it exists (it needs the storage, which needs this).
    private let directoryBox = Mutex<SessionDirectory?>(nil)

    struct State {
        /// Sessions this pair owns, with the epoch it owns them at and when it came to own them.
        var owned: [SessionID: (epoch: Int64, since: ContinuousClock.Instant)] = [:]
        /// When the last renewal that succeeded was sent.
        var renewedAt: ContinuousClock.Instant?
        var draining = false
        var fences: UInt64 = 0
        var takeovers: UInt64 = 0
    }

    init(settings: ClusterSettings, client: PostgresClient, logger: Logger) {
        self.settings = settings
        database = ClusterDatabase(client: client, pairID: settings.pairID, logger: logger)
        self.logger = logger
    }

    func attach(_ directory: SessionDirectory) { directoryBox.withLock { $0 = directory } }

    /// Where the engine's last load report is read for the heartbeat.
    private let loadReader = Mutex<(@Sendable () -> LoadReport?)?>(nil)
    func readLoad(from reader: @escaping @Sendable () -> LoadReport?) { loadReader.withLock { $0 = reader } }

    /// What the heartbeat says of this pair's load: the engine's CPU against its budget (else the
    /// host's load per core), its late frames over the last minute, and whether it takes new plays.
    private var heartbeatLoad: (load: Double, lateFrames: Int, admitting: Bool) {
        guard let report = loadReader.withLock({ $0 })?() else { return (LoadScore.hostLoad(), 0, true) }
        let load = report.budgetCores > 0 ? report.cpuCores / report.budgetCores : LoadScore.hostLoad()
        return (load, Int(clamping: report.lateFramesPerMinute), report.admitting)
    }
    private var directory: SessionDirectory? { directoryBox.withLock { $0 } }

    /// The epoch this pair owns `id` at, if it owns it and is not fenced.
    func epoch(of id: SessionID) -> Int64? { state.withLock { $0.owned[id]?.epoch } }

    var ownedCount: Int { state.withLock { $0.owned.count } }

    /// This pair's part in the cluster, for `/health`.
    struct Report: Codable, Sendable {
        var pair: String
        var address: String
        var ownedSessions: Int
        var leaseSeconds: Double
        /// How long ago the last renewal that succeeded was sent (nil: none yet).
        var renewedSecondsAgo: Double?
        /// Whether this pair can prove it owns its sessions (its renewals succeed).
        var ok: Bool
        var fences: UInt64
        var takeovers: UInt64
        enum CodingKeys: String, CodingKey {
            case pair, address, ok, fences, takeovers
            case ownedSessions = "owned_sessions"
            case leaseSeconds = "lease_seconds"
            case renewedSecondsAgo = "renewed_seconds_ago"
        }
    }

    var report: Report {
        state.withLock { state in
            let ago = state.renewedAt.map { ContinuousClock.now - $0 }
            return Report(
                pair: settings.pairID, address: settings.address, ownedSessions: state.owned.count,
                leaseSeconds: ClusterDatabase.seconds(settings.lease), renewedSecondsAgo: ago.map(ClusterDatabase.seconds),
                ok: ago.map { $0 < settings.lease - settings.fenceMargin } ?? false, fences: state.fences, takeovers: state.takeovers)
        }
    }

    // MARK: Placement

    /// Where `id` plays, giving it an owner when it has none: this pair when it has the lowest
    /// load score, else the pair that has. Throws 503 while the cluster cannot tell (PostgreSQL
    /// unreachable, or every pair full).
    func place(_ id: SessionID) async throws(APIError) -> Placement {
        if epoch(of: id) != nil { return .local }
        for _ in 0..<3 {
            do {
                let ownership = try await database.ownership(of: id)
                if let ownership, ownership.live, let owner = ownership.owner {
                    if owner == settings.pairID {
                        await adopt(id, epoch: ownership.epoch)
                        return .local
                    }
                    let pairs = try await database.livePairs(within: settings.pairTimeout)
                    if let pair = pairs.first(where: { $0.id == owner }) { return .remote(pair.address) }
                    throw Self.unavailable("the pair that plays this session stopped answering; it moves within seconds")
                }
                let pairs = try await database.livePairs(within: settings.pairTimeout)
                guard let best = LoadScore.best(of: pairs, for: id.description) else {
                    throw Self.unavailable("every pair of the cluster is full or draining")
                }
                // An empty snapshot: the owner starts it with its own defaults (TONEARM_NORMALIZE).
                guard let epoch = try await database.assign(id, to: best.id, expected: ownership, lease: settings.lease, snapshot: "")
                else { continue }  // another pair placed it first: look again
                if best.id == settings.pairID {
                    await adopt(id, epoch: epoch)
                    return .local
                }
                return .remote(best.address)
            } catch let error as APIError {
                throw error
            } catch {
                throw Self.unavailable("the cluster's database does not answer (\(Self.describe(error)))")
            }
        }
        throw Self.unavailable("the session's owner keeps changing; try again")
    }

    private static func unavailable(_ message: String) -> APIError {
        APIError(status: .serviceUnavailable, code: "cluster_unavailable", message: message, retryAfterSeconds: 1)
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError { return error.serverInfo?[.message] ?? "\(error.code)" }
        return "\(error)"
    }

    // MARK: Owning

    /// Takes `id` on at `epoch`: its controller is made from the stored snapshot, and a session
    /// that was playing on the pair before plays here from its stored position.
    private func adopt(_ id: SessionID, epoch: Int64) async {
        // A pair handing its sessions over takes none: one given to it meanwhile goes back.
        if isDraining {
            try? await database.release(id, epoch: epoch)
            return
        }
        let isNew = state.withLock { state -> Bool in
            defer { state.owned[id] = (epoch, .now) }
            // The statement that gave it a lease counts as a renewal for the fence.
            if state.renewedAt == nil { state.renewedAt = .now }
            return state.owned[id] == nil
        }
        guard isNew, let directory else { return }
        state.withLock { $0.takeovers += 1 }
        await directory.adopt(id)
    }

    /// Lets go of `id` here: its clients are told to reconnect (to its new owner), its play stops.
    private func lose(_ id: SessionID, why: String) async {
        guard state.withLock({ $0.owned.removeValue(forKey: id) }) != nil else { return }
        logger.notice("session left this pair", metadata: ["session.id": "\(id)", "why": "\(why)"])
        await directory?.drop(id)
    }

    // MARK: Draining

    /// Whether this pair is handing its sessions over (SIGTERM, or `POST /api/cluster/drain`):
    /// placement gives it nothing new.
    var isDraining: Bool { state.withLock { $0.draining } }

    /// How far ahead a hand-over's moment is set: time for the taking pair's next round (it learns
    /// of the session by renewing its leases, every lease/8) and for its engine to open the track
    /// and encode ahead.
    static let handOverLeadMS: Int64 = 1_500

    /// Hands every session this pair owns to the others, and takes no new ones. A session being
    /// heard goes at an agreed moment `handOverLeadMS` ahead (`scheduleMoves`); any other
    /// (paused, idle, near its track's end) is stored as of now and its lease ended at once, for
    /// the others' next round. Answers how many were handed over.
    @discardableResult
    func handOver() async -> Int {
        state.withLock { $0.draining = true }
        let load = heartbeatLoad
        try? await database.heartbeat(
            address: settings.address, sessions: ownedCount, maxSessions: settings.maxSessions, load: load.load,
            lateFrames: load.lateFrames, draining: true, admitting: load.admitting)
        let pairs = ((try? await database.livePairs(within: settings.pairTimeout)) ?? []).filter { $0.id != settings.pairID }
        let owned = state.withLock { $0.owned }
        let moving = await scheduleMoves(Array(owned.keys), to: pairs)
        // The rest the quick way: the database first, for every session (a few ms each), then the
        // engine: an engine being stopped too may answer slowly or not at all, and must not hold
        // the hand-over.
        var handed = moving.letGo
        for id in owned.keys where !moving.ids.contains(id) && !moving.letGo.contains(id) {
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
        guard let ownership = state.withLock({ $0.owned[id] }) else { return false }
        if let snapshot = await directory?.checkpoint(id), let json = try? JSONCoding.encoder.encode(snapshot) {
            _ = try? await database.store(
                id, json: String(decoding: json, as: UTF8.self), active: snapshot.isActive, epoch: ownership.epoch)
        }
        guard state.withLock({ $0.owned.removeValue(forKey: id) }) != nil else { return false }
        try? await database.release(id, epoch: ownership.epoch)
        return true
    }

    /// Gives each of `ids` that is being heard to the pair of `pairs` with the lowest load score,
    /// at one moment `handOverLeadMS` ahead: this pair's engine answers where its play will be
    /// then and sends nothing after; the row names the taking pair, the position and the moment;
    /// that pair's engine opens the track there ahead of time and sends its first frame at the
    /// moment. The clients here hear this engine until then (`finishMoves`). A session that is
    /// not being heard, or whose track ends (or fades into the next) before the moment, is left;
    /// at most `limit` are moved.
    private func scheduleMoves(_ ids: [SessionID], to candidates: [ClusterDatabase.Pair], limit: Int = .max) async -> Moves {
        var pairs = candidates
        var moves = Moves(atMS: SessionDirectory.wallClockMS() + Self.handOverLeadMS)
        guard let directory else { return moves }
        for id in ids where moves.ids.count < limit {
            guard let ownership = state.withLock({ $0.owned[id] }), let current = await directory.checkpoint(id),
                Self.mayScheduleHandOver(current), let best = LoadScore.best(of: pairs, for: id.description),
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
            state.withLock { _ = $0.owned.removeValue(forKey: id) }
            await directory.detach(id)
            pairs[index].sessions += 1
            moves.ids.append(id)
            logger.info(
                "hand-over scheduled",
                metadata: ["session.id": "\(id)", "to": "\(best.id)", "epoch": "\(given)", "position.ms": "\(point.positionMS)"])
        }
        return moves
    }

    /// Waits out the moves' moment: each session's clients move once its last frame here is out
    /// (the engine's `finished`/`handed_over`); this is for an engine that never says so.
    private func finishMoves(_ moves: Moves) async {
        guard !moves.ids.isEmpty, let directory else { return }
        try? await Task.sleep(until: SessionDirectory.instant(ofWallClockMS: moves.atMS) + .milliseconds(300))
        for id in moves.ids { await directory.finishHandOver(id) }
    }

    /// Whether a session is handed over at an agreed moment rather than at once: it is being
    /// heard, and its track does not end (or fade into the next) before the moment.
    static func mayScheduleHandOver(_ snapshot: SessionSnapshot) -> Bool {
        guard snapshot.queue.status == .playing, snapshot.startAtMS == nil, snapshot.queue.currentTrack != nil else { return false }
        guard let duration = snapshot.queue.currentTrack?.durationMS else { return true }
        return duration - snapshot.positionMS > handOverLeadMS + Int64(snapshot.crossfadeMS) + 1_000
    }

    // MARK: Rebalancing

    /// A pair that owns at least `rebalanceMargin` more sessions than the least loaded other pair
    /// (one that came back, or joined) gives it half the difference, a few at a time, each at a
    /// moment as a drain does: nobody hears the move. Sessions taken in the last
    /// `rebalanceSettle` stay, so a session does not bounce between pairs.
    static let rebalanceMargin = 2
    static let rebalanceBatch = 4
    static let rebalanceSettle: Duration = .seconds(10)

    /// How many sessions to move now, which may go (those not taken lately, in a fixed order;
    /// the ones not being heard are passed over), and where; nil: none.
    static func rebalancing(
        owned: [SessionID: ContinuousClock.Instant], pairs: [ClusterDatabase.Pair], me: String, now: ContinuousClock.Instant
    ) -> (count: Int, candidates: [SessionID], target: ClusterDatabase.Pair)? {
        let others = pairs.filter { $0.id != me && !$0.draining && $0.sessions < $0.maxSessions }
        guard let least = others.min(by: { ($0.sessions, $0.id) < ($1.sessions, $1.id) }),
            owned.count - least.sessions >= rebalanceMargin
        else { return nil }
        let count = min((owned.count - least.sessions) / 2, rebalanceBatch, least.maxSessions - least.sessions)
        let settled = owned.filter { now - $0.value >= rebalanceSettle }.map(\.key).sorted { $0.description < $1.description }
        return settled.isEmpty ? nil : (count, settled, least)
    }

    /// Looks for an imbalance once a lease; never in the rounds themselves, which must renew the
    /// leases while the moves wait for their moment.
    private func rebalanceLoop() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: settings.lease)
            guard !Task.isCancelled, let pairs = try? await database.livePairs(within: settings.pairTimeout) else { continue }
            await rebalance(with: pairs)
        }
    }

    /// One rebalancing step: moves sessions to the least loaded pair while
    /// the rounds go on (the moves' moment is 1.5 s ahead).
    private func rebalance(with pairs: [ClusterDatabase.Pair]) async {
        guard !isDraining else { return }
        let owned = state.withLock { $0.owned.mapValues(\.since) }
        guard let plan = Self.rebalancing(owned: owned, pairs: pairs, me: settings.pairID, now: .now) else { return }
        let moves = await scheduleMoves(plan.candidates, to: [plan.target], limit: plan.count)
        if let directory {
            for id in moves.letGo { await directory.drop(id) }
        }
        guard !moves.ids.isEmpty else { return }
        logger.notice("moving sessions to a less loaded pair", metadata: ["sessions": "\(moves.ids.count)", "to": "\(plan.target.id)"])
        await finishMoves(moves)
    }

    /// The directory released `id` (idle, no clients): its lease ends now.
    func released(_ id: SessionID) async {
        guard let owned = state.withLock({ $0.owned.removeValue(forKey: id) }) else { return }
        try? await database.release(id, epoch: owned.epoch)
    }

    // MARK: Running

    /// Runs the PostgreSQL connection pool, makes the tables (trying again every second while the
    /// database does not answer: commands answer 503 meanwhile), then the rounds until the
    /// graceful shutdown; then hands over what is left and leaves. The pool outlives the rounds,
    /// so the writer's last flush (stopped before this) and the hand-over still reach PostgreSQL.
    func run() async throws {
        await withDiscardingTaskGroup { pool in
            pool.addTask { await self.database.client.run() }
            await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    do {
                        try await self.database.migrate()
                        break
                    } catch {
                        self.logger.warning("cannot reach the cluster's database; trying again", metadata: ["error": "\(Self.describe(error))"])
                        try? await Task.sleep(for: .seconds(1))
                    }
                }
                self.logger.info(
                    "cluster member",
                    metadata: ["pair": "\(self.settings.pairID)", "address": "\(self.settings.address)", "lease": "\(self.settings.lease)"])
                await withDiscardingTaskGroup { group in
                    group.addTask { await self.fenceWatch() }
                    group.addTask { await self.rebalanceLoop() }
                    while !Task.isCancelled {
                        await self.round()
                        try? await Task.sleep(for: self.settings.renewEvery)
                    }
                    group.cancelAll()
                }
            }
            // What a hand-over left (sessions placed here meanwhile) goes too.
            await handOver()
            try? await database.leave()
            pool.cancelAll()
        }
    }

    /// One heartbeat, renewal and orphan scan; a failure is tried again next round (the fence
    /// watch stops the plays if renewals keep failing).
    private func round() async {
        do {
            try await withTimeout(settings.renewEvery * 2) { try await self.renewAndScan() }
        } catch {
            logger.warning("cluster round failed", metadata: ["error": "\(Self.describe(error))"])
        }
    }

    private func renewAndScan() async throws {
        let sent = ContinuousClock.now
        let load = heartbeatLoad
        try await database.heartbeat(
            address: settings.address, sessions: ownedCount, maxSessions: settings.maxSessions,
            load: load.load, lateFrames: load.lateFrames, draining: isDraining, admitting: load.admitting)
        let renewed = try await database.renew(lease: settings.lease)
        let (lost, gained) = state.withLock { state -> ([SessionID], [(SessionID, Int64)]) in
            state.renewedAt = sent
            let lost = state.owned.filter { renewed[$0.key] == nil && $0.value.since < sent }.map(\.key)
            let gained = renewed.filter { state.owned[$0.key]?.epoch != $0.value }.map { ($0.key, $0.value) }
            return (lost, gained)
        }
        for id in lost { await lose(id, why: "its lease is another pair's") }
        for (id, epoch) in gained {
            if state.withLock({ $0.owned[id] != nil }) {
                state.withLock { $0.owned[id]?.epoch = epoch }
            } else {
                await adopt(id, epoch: epoch)
            }
        }
        try await placeOrphans()
    }

    /// Takes each active session whose lease ran out when this pair has the lowest load score
    /// for it (counting each one taken as load for the next), so it plays again without waiting
    /// for another round; an orphan the best pair has not taken a few rounds on (that pair may
    /// be the next to fail) goes to the best pair by whoever sees it.
    private func placeOrphans() async throws {
        let orphans = try await database.orphans()
        guard !orphans.isEmpty else { return }
        var pairs = try await database.livePairs(within: settings.pairTimeout)
        for orphan in orphans {
            guard let best = LoadScore.best(of: pairs, for: orphan.id.description), let index = pairs.firstIndex(of: best) else { return }
            guard best.id == settings.pairID || orphan.expiredFor > settings.renewEvery * 3 else { continue }
            guard
                let epoch = try await database.assign(
                    orphan.id, to: best.id, expected: orphan.ownership, lease: settings.lease, snapshot: "")
            else { continue }
            pairs[index].sessions += 1
            logger.notice(
                "took over a session whose lease ended",
                metadata: [
                    "session.id": "\(orphan.id)", "from": "\(orphan.ownership.owner ?? "-")", "to": "\(best.id)", "epoch": "\(epoch)",
                ])
            if best.id == settings.pairID { await adopt(orphan.id, epoch: epoch) }
        }
    }

    /// Stops every play this pair holds once its leases could be about to pass to another pair.
    private func fenceWatch() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(100))
            let expired = state.withLock { state -> [SessionID] in
                guard let renewedAt = state.renewedAt, !state.owned.isEmpty,
                    ContinuousClock.now - renewedAt > settings.lease - settings.fenceMargin
                else { return [] }
                state.fences += 1
                return Array(state.owned.keys)
            }
            guard !expired.isEmpty else { continue }
            logger.error(
                "cannot renew this pair's leases; stopping its sessions before another pair takes them",
                metadata: ["sessions": "\(expired.count)"])
            for id in expired { await lose(id, why: "its lease could not be renewed") }
        }
    }
}

/// Runs `body`, or throws `TimeoutError` after `limit`.
func withTimeout<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw TimeoutError(limit: limit) }
        return value
    }
}

struct TimeoutError: Error, CustomStringConvertible {
    var limit: Duration
    var description: String { "no answer within \(limit)" }
}
