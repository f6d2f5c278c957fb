// One pair's membership of a cluster, run: its rounds (heartbeat and renewal in one statement,
// then the orphans), placement for its clients, the fence, and its engine's fence. Every decision
// is `ClusterMachine`'s; this runs the statements and carries out what it decides, as
// `SessionController` runs `SessionMachine`. docs/cluster.md has the timings and the argument.
import EngineAPI
import Foundation
import HTTPTypes
import Logging
import PostgresNIO
import ServiceLifecycle
import ServiceSupport
import Synchronization
import WireProtocol

final class ClusterMember: Service, Sendable {
    let settings: ClusterSettings
    let database: ClusterDatabase
    let logger: Logger
    let machine: Mutex<ClusterMachine>
    /// Who this Router is to its engine's fence: one per process.
    let holder = UUID().uuidString
    /// The directory, set once it exists (it needs the storage, which needs this).
    private let directoryBox = Mutex<SessionDirectory?>(nil)
    /// Where the engine's last load report is read for the heartbeat.
    private let loadReader = Mutex<(@Sendable () -> LoadReport?)?>(nil)
    /// Where the engine's fence goes (nil: nowhere, in tests without an engine).
    private let fenceSender = Mutex<(@Sendable (Fence) async -> Void)?>(nil)
    /// Told of each session this pair takes on, once it plays here (the Lavalink players' rows).
    private let adoptedHandler = Mutex<(@Sendable (SessionID) async -> Void)?>(nil)
    /// When this pair last moved sessions to rebalance (its loads may not show it yet).
    let lastRebalance = Mutex<ContinuousClock.Instant?>(nil)

    init(settings: ClusterSettings, hosts: DatabaseHosts, logger: Logger) {
        self.settings = settings
        database = ClusterDatabase(hosts: hosts, pairID: settings.pairID, logger: logger)
        self.logger = logger
        machine = Mutex(ClusterMachine(settings: settings))
    }

    func attach(_ directory: SessionDirectory) { directoryBox.withLock { $0 = directory } }
    var directory: SessionDirectory? { directoryBox.withLock { $0 } }
    func readLoad(from reader: @escaping @Sendable () -> LoadReport?) { loadReader.withLock { $0 = reader } }
    func sendFences(to sender: @escaping @Sendable (Fence) async -> Void) { fenceSender.withLock { $0 = sender } }
    func onAdopted(_ handler: @escaping @Sendable (SessionID) async -> Void) { adoptedHandler.withLock { $0 = handler } }

    /// What the heartbeat says of this pair: the engine's CPU against its budget (else the host's
    /// load per core), its late frames over the last minute, and whether it takes new plays.
    var heartbeat: ClusterDatabase.Heartbeat {
        let (owned, draining) = machine.withLock { ($0.owned.count, $0.draining) }
        var beat = ClusterDatabase.Heartbeat(
            address: settings.address, sessions: owned, maxSessions: settings.maxSessions, load: LoadScore.hostLoad(), lateFrames: 0,
            draining: draining)
        if let report = loadReader.withLock({ $0 })?() {
            if report.budgetCores > 0 { beat.load = report.cpuCores / report.budgetCores }
            beat.lateFrames = Int(clamping: report.lateFramesPerMinute)
            beat.admitting = report.admitting
        }
        return beat
    }

    /// The epoch this pair owns `id` at, if it owns it and is not fenced.
    func epoch(of id: SessionID) -> Int64? { machine.withLock { $0.owned[id]?.epoch } }
    var ownedCount: Int { machine.withLock { $0.owned.count } }
    var isDraining: Bool { machine.withLock { $0.draining } }

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
        /// The Router's relays (filled in by `/health`, which knows them): clients here whose
        /// session plays on another pair; stations another pair plays that this Router relays to
        /// its followers; other Routers' relays of the stations this pair plays.
        var relayedClients = 0
        var relayUpstreams = 0
        var stationRelays = 0
        var stationRelaysServed = 0
        enum CodingKeys: String, CodingKey {
            case pair, address, ok, fences, takeovers
            case ownedSessions = "owned_sessions"
            case leaseSeconds = "lease_seconds"
            case renewedSecondsAgo = "renewed_seconds_ago"
            case relayedClients = "relayed_clients"
            case relayUpstreams = "relay_upstreams"
            case stationRelays = "station_relays"
            case stationRelaysServed = "station_relays_served"
        }
    }

    var report: Report {
        let now = ContinuousClock.now
        return machine.withLock { machine in
            Report(
                pair: settings.pairID, address: settings.address, ownedSessions: machine.owned.count,
                leaseSeconds: ClusterDatabase.seconds(settings.lease),
                renewedSecondsAgo: machine.renewedAt.map { ClusterDatabase.seconds(now - $0) }, ok: machine.mayPlay(at: now),
                fences: machine.fences, takeovers: machine.takeovers)
        }
    }

    // MARK: Placement

    /// Where `id` plays, giving it an owner when it has none: this pair when it has the lowest
    /// load score, else the pair that has. Throws 503 while the cluster cannot tell (PostgreSQL
    /// unreachable, this pair unable to renew, or every pair full).
    func place(_ id: SessionID) async throws(APIError) -> Placement {
        if epoch(of: id) != nil { return .local }
        await firstRound()
        for _ in 0..<3 {
            do {
                // Read, decided and assigned under the placement lock (ClusterDatabase+Placement);
                // an empty snapshot: the owner starts it with its own defaults (TONEARM_NORMALIZE).
                let sent = ContinuousClock.now
                let (placing, assigned) = try await database.placing(
                    id, pairsWithin: settings.pairTimeout, steadyFor: settings.lease, lease: settings.lease
                ) { ownership, pairs in
                    let placing = self.machine.withLock { $0.placing(ownership, pairs: pairs, for: id, at: .now) }
                    guard case .assign(let pair) = placing else { return (placing, nil) }
                    return (placing, pair.id)
                }
                switch placing {
                case .remote(let address):
                    return .remote(address)
                case .unavailable(let why):
                    throw Self.unavailable(why)
                case .local(let epoch):
                    if await take(id, epoch: epoch, sent: .now) { return .local }
                    throw Self.unavailable("this pair cannot renew its leases at the moment; the session moves within seconds")
                case .assign(let pair):
                    guard let epoch = assigned else { continue }  // another path changed it first: look again
                    logger.info("placed a session a client asked for", metadata: ["session.id": "\(id)", "to": "\(pair.id)", "epoch": "\(epoch)"])
                    guard pair.id == settings.pairID else { return .remote(pair.address) }
                    if await take(id, epoch: epoch, sent: sent) { return .local }
                    throw Self.unavailable("this pair cannot renew its leases at the moment; the session moves within seconds")
                }
            } catch let error as APIError {
                throw error
            } catch {
                throw Self.unavailable("the cluster's database does not answer (\(Self.describe(error)))")
            }
        }
        throw Self.unavailable("the session's owner keeps changing; try again")
    }

    /// Until this pair's first round has proved its leases (at most a lease): before it, it
    /// cannot take a session.
    private func firstRound() async {
        let deadline = ContinuousClock.now + settings.lease
        while machine.withLock({ $0.renewedAt == nil }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    static func unavailable(_ message: String) -> APIError {
        APIError(status: .serviceUnavailable, code: "cluster_unavailable", message: message, retryAfterSeconds: 1)
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? PSQLError { return error.serverInfo?[.message] ?? "\(error.code)" }
        return "\(error)"
    }

    // MARK: Owning

    /// Takes `id` on at `epoch`, given by a statement sent at `sent` (`claim`, then the engine's
    /// fence moved on, then `adopt`). Answers whether this pair owns it now.
    private func take(_ id: SessionID, epoch: Int64, sent: ContinuousClock.Instant) async -> Bool {
        guard let isNew = await claim(id, epoch: epoch, sent: sent) else { return false }
        guard isNew else { return true }
        // The pair's own work, not its caller's: a client that asked and went away (its task
        // cancelled) must call off neither the fence nor the snapshot's reading.
        await Task { [self] in
            await pushFence()
            await adopt(id, epoch: epoch)
        }.value
        return true
    }

    /// The machine's word on `id` given to this pair: nil when it does not take it (a draining
    /// pair gives it back at once), else whether it is new here. One new here is reserved in
    /// the directory from before the pair owns it until `adopt` has made its controller, so a
    /// client that finds it owned meanwhile waits for that controller.
    private func claim(_ id: SessionID, epoch: Int64, sent: ContinuousClock.Instant) async -> Bool? {
        await directory?.reserve(id)
        switch machine.withLock({ $0.take(id, epoch: epoch, sent: sent, now: .now) }) {
        case .release:
            await directory?.unreserve(id)
            try? await database.release(id, epoch: epoch)
            return nil
        case .refused:
            await directory?.unreserve(id)
            return nil
        case .owned(let isNew):
            if !isNew { await directory?.unreserve(id) }
            return isNew
        }
    }

    /// A session new here (the engine's fence names it already): its controller is made from the
    /// stored snapshot, and one that was playing on its last pair plays here from its stored
    /// position, unless this pair lost it while the snapshot was read. A snapshot that cannot be
    /// read lets the session go (its lease ends; it is taken again, here or elsewhere, at the
    /// next round).
    private func adopt(_ id: SessionID, epoch: Int64) async {
        guard let directory else { return }
        let adopted = await directory.adopt(id) { [self] in machine.withLock { $0.holds(id, epoch: epoch, at: .now) } }
        await directory.unreserve(id)  // the claim's
        if adopted, let handler = adoptedHandler.withLock({ $0 }) { Task { await handler(id) } }
        guard !adopted, machine.withLock({ $0.owned[id]?.epoch == epoch ? $0.remove(id, at: .now) : nil }) != nil else { return }
        try? await database.release(id, epoch: epoch)
    }

    /// Lets go of sessions the fence took: their clients are told to reconnect (to their new
    /// owner), their plays stop (the engine's fence first: a play started late for one is
    /// stopped too).
    private func lose(_ ids: [SessionID], why: String) async {
        await pushFence()
        for id in ids {
            logger.notice("session left this pair", metadata: ["session.id": "\(id)", "why": "\(why)"])
            await directory?.drop(id)
        }
    }

    /// Sends the engine what this pair may play now, and for how long.
    func pushFence() async {
        guard let send = fenceSender.withLock({ $0 }) else { return }
        let fence = machine.withLock { $0.fence(holder: holder, at: .now) }
        await send(fence)
    }

    /// The directory released `id` (idle, no clients): its lease ends now.
    func released(_ id: SessionID) async {
        guard let owned = machine.withLock({ $0.remove(id, at: .now) }) else { return }
        try? await database.release(id, epoch: owned.epoch)
    }

    // MARK: Running

    /// Runs the PostgreSQL connection pool, makes the tables (trying again every second while the
    /// database does not answer: commands answer 503 meanwhile), then the rounds until the
    /// graceful shutdown; then hands over what is left and leaves. The pool outlives the rounds,
    /// so the writer's last flush (stopped before this) and the hand-over still reach PostgreSQL.
    func run() async throws {
        await withDiscardingTaskGroup { pool in
            pool.addTask { await self.database.hosts.run() }
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

    /// One round: heartbeat and renewal in one statement, what it changed carried out, the
    /// engine's fence moved on, then the orphans. A failure is tried again next round (the fence
    /// watch stops the plays if renewals keep failing).
    private func round() async {
        let began = ContinuousClock.now
        defer {
            // Meanwhile nothing renews this pair's leases nor moves its engine's fence on.
            let took = ContinuousClock.now - began
            if took > settings.fenceMargin { logger.notice("a cluster round took long", metadata: ["took": "\(took)"]) }
        }
        do {
            let sent = ContinuousClock.now
            let rows = try await database.round(heartbeat, lease: settings.lease, gap: settings.steadyGap, within: settings.roundLimit)
            let (lost, gained) = machine.withLock { $0.renewed(rows, sent: sent) }
            var adopted: [(SessionID, Int64)] = []
            for (id, epoch) in gained where await claim(id, epoch: epoch, sent: sent) == true {
                logger.notice("took on a session this pair's renewal named", metadata: ["session.id": "\(id)", "epoch": "\(epoch)"])
                adopted.append((id, epoch))
            }
            // The fence first: it names what is new and leaves out what was lost.
            await pushFence()
            for id in lost {
                logger.notice("session left this pair", metadata: ["session.id": "\(id)", "why": "its lease is another pair's"])
                await directory?.drop(id)
            }
            // At once, not one after the other: each reads its snapshot, and the next renewal waits
            // for this round (26 taken on after a database failover held a round 5.7 s).
            await withDiscardingTaskGroup { group in
                for (id, epoch) in adopted { group.addTask { await self.adopt(id, epoch: epoch) } }
            }
            await resumeLostToFence()
            try await placeOrphans()
        } catch {
            logger.warning("cluster round failed", metadata: ["error": "\(Self.describe(error))"])
        }
    }

    /// Plays on what this pair holds and its engine stopped for the fence: a fence that ran out
    /// before the next one came (the rounds late under load) stops plays the pair may still play,
    /// and nothing else would start them again while it holds them (2026-11-29's chaos run: 26
    /// guilds silent for 23 s after a database failover, until their pair was killed).
    private func resumeLostToFence() async {
        guard let directory else { return }
        let held = machine.withLock { $0.mayPlay(at: .now) ? Array($0.owned.keys) : [] }
        for id in held {
            guard let controller = await directory.existing(id), await controller.takeLostToFence() else { continue }
            logger.warning("resuming a session its engine stopped for the fence while this pair held it", metadata: ["session.id": "\(id)"])
            Task { [logger] in
                do throws(APIError) {
                    try await controller.perform(.resume)
                } catch {
                    logger.warning("could not resume a session stopped for the fence", metadata: ["session.id": "\(id)", "error": "\(error.message)"])
                }
            }
        }
    }

    /// Takes each orphan (an active session whose lease ran out) this pair is the best for, and
    /// gives those the best pair has left for three rounds to it.
    private func placeOrphans() async throws {
        let orphans = try await database.orphans()
        guard !orphans.isEmpty else { return }
        let pairs = try await database.livePairs(within: settings.pairTimeout, steadyFor: settings.lease)
        var taken: [(SessionID, Int64, ContinuousClock.Instant)] = []
        for (orphan, pair) in machine.withLock({ $0.orphanAssignments(orphans, pairs: pairs, at: .now) }) {
            let sent = ContinuousClock.now
            guard let epoch = try await database.assign(orphan.id, to: pair.id, expected: orphan.ownership, lease: settings.lease, snapshot: "")
            else { continue }
            logger.notice(
                "took over a session whose lease ended",
                metadata: [
                    "session.id": "\(orphan.id)", "from": "\(orphan.ownership.owner ?? "-")", "to": "\(pair.id)", "epoch": "\(epoch)",
                ])
            if pair.id == settings.pairID { taken.append((orphan.id, epoch, sent)) }
        }
        // Taken on at once, as the renewal's (above).
        await withDiscardingTaskGroup { group in
            for (id, epoch, sent) in taken { group.addTask { _ = await self.take(id, epoch: epoch, sent: sent) } }
        }
    }

    /// Stops every play this pair holds once its leases could be about to pass to another pair.
    private func fenceWatch() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(100))
            let expired = machine.withLock { $0.fenceExpired(at: .now) }
            guard !expired.isEmpty else { continue }
            logger.error(
                "cannot renew this pair's leases; stopping its sessions before another pair takes them",
                metadata: ["sessions": "\(expired.count)"])
            await lose(expired, why: "its lease could not be renewed")
        }
    }
}
