// The cluster's database may be several PostgreSQL servers, one primary and its standbys, kept by
// a failover tool (pg_auto_failover, Patroni): TONEARM_DATABASE_URL then names them all,
// `postgres://user@host1:5432,host2:5432/db`. Every statement goes to the one that takes writes.
// Which one that is, is found by asking each (`SHOW transaction_read_only`, as libpq's
// `target_session_attrs=read-write` does) and kept until a statement on it fails; the next
// statement asks again. A standby just promoted may refuse writes for a while (pg_auto_failover
// keeps it read-only until the old primary must have stopped): it is not taken until it accepts
// them. With one host, nothing is asked.
import Logging
import PostgresNIO
import Synchronization

final class DatabaseHosts: Sendable {
    private let clients: [PostgresClient]
    /// The index of the host that took writes at the last look, while its statements succeed.
    private let primary = Mutex<Int?>(nil)
    private let logger: Logger

    init(_ configurations: [PostgresClient.Configuration], logger: Logger) {
        clients = configurations.map { PostgresClient(configuration: $0, backgroundLogger: logger) }
        self.logger = logger
    }

    convenience init(url: String, connectTimeout: Duration? = nil, logger: Logger) throws {
        var configurations = try PostgresClient.Configuration.parse(urls: url)
        if let connectTimeout {
            for index in configurations.indices { configurations[index].options.connectTimeout = connectTimeout }
        }
        self.init(configurations, logger: logger)
    }

    var count: Int { clients.count }

    /// Runs every host's connection pool until cancelled.
    func run() async {
        await withDiscardingTaskGroup { group in
            for client in clients { group.addTask { await client.run() } }
        }
    }

    /// Runs `body` on the primary, or throws once `limit` has passed (finding the primary counts).
    func run<T: Sendable>(within limit: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        let started = ContinuousClock.now
        let index = try await primaryIndex(within: limit)
        let left = limit - (ContinuousClock.now - started)
        guard left > .zero else { throw TimeoutError(limit: limit) }
        do {
            return try await clients[index].run(within: left, body)
        } catch {
            // Whatever failed (a connection lost, a server now read-only, a deadline), the next
            // statement looks again; with one host there is nothing to look for.
            if clients.count > 1 { primary.withLock { if $0 == index { $0 = nil } } }
            throw error
        }
    }

    /// Asks every host at once; answers the first that takes writes, without waiting for the
    /// others. Each question runs to its own deadline, not cancelled: a statement PostgresNIO has
    /// sent cannot be called off, and one sent on a connection to a host cut off would hold a
    /// cancelled search until TCP gave up; its deadline closes that connection instead.
    private func primaryIndex(within limit: Duration) async throws -> Int {
        if clients.count == 1 { return 0 }
        if let known = primary.withLock({ $0 }) { return known }
        let search = Search(hosts: clients.count)
        let found: Int? = await withCheckedContinuation { continuation in
            for (index, client) in clients.enumerated() {
                Task {
                    let writable = try? await client.run(within: limit) { connection in
                        let rows = try await connection.query("SHOW transaction_read_only", logger: self.logger)
                        for try await value in rows.decode(String.self) { return value == "off" }
                        return false
                    }
                    if let outcome = search.answered(index, writable: writable == true) { continuation.resume(returning: outcome) }
                }
            }
        }
        guard let found else { throw NoPrimaryError(hosts: clients.count) }
        primary.withLock { $0 = found }
        logger.info("the cluster's database takes writes at host \(found + 1) of \(clients.count)")
        return found
    }
}

/// One search for the primary: the first writable answer ends it, or the last answer.
private final class Search: Sendable {
    private let state: Mutex<(ended: Bool, waiting: Int)>

    init(hosts: Int) { state = Mutex((false, hosts)) }

    /// What the search answers now, once: the writable host, or nil when every host said no.
    func answered(_ index: Int, writable: Bool) -> Int?? {
        state.withLock { state -> Int?? in
            state.waiting -= 1
            guard !state.ended, writable || state.waiting == 0 else { return .none }
            state.ended = true
            return .some(writable ? index : nil)
        }
    }
}

struct NoPrimaryError: Error, CustomStringConvertible {
    var hosts: Int
    var description: String { "none of the database's \(hosts) hosts takes writes now" }
}
