// PostgreSQL kept highly available by pg_auto_failover (Debian's postgresql-15-auto-failover): a
// monitor and two data nodes on this host, the standby synchronous, the monitor's health checks
// and the keepers' timeouts shortened so that a lost primary is replaced in about 9 s
// (docs/cluster.md "PostgreSQL highly available"). Run as the `postgres` user when the tests run
// as root.
import Foundation

public final class PostgresHA: ClusterDatabaseServer, @unchecked Sendable {
    // @unchecked: the processes are started once, then only signalled.
    public let directory: TemporaryDirectory
    public let monitorPort: Int
    public let nodePorts: [Int]
    private var keepers: [Process] = []
    private let asRoot = getuid() == 0

    /// Whether pg_autoctl is installed.
    public static var installed: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/pg_autoctl") && PostgresServer.binaries != nil }

    public init(nodes: Int = 2) throws {
        guard Self.installed else { throw FixtureError("pg_auto_failover is not installed (apt-get install postgresql-15-auto-failover)") }
        directory = try TemporaryDirectory(prefix: "tonearm-paf")
        if asRoot { chmod(directory.path, 0o777) }
        monitorPort = try freePort()
        nodePorts = try (0..<nodes).map { _ in try freePort() }
        try keep(["create", "monitor", "--pgdata", directory.file("monitor"), "--pgport", "\(monitorPort)"], log: "monitor")
        try wait("the monitor", timeout: 60) {
            (try? self.monitor("SELECT count(*) FROM pgautofailover.node")) != nil
        }
        // Found out within ~1.5 s, judged unhealthy after 3 s; a promoted standby takes writes 5 s
        // after the old primary went silent, which by then has stopped taking them (its keeper's
        // network_partition_timeout, 3 s, below).
        for (name, value) in [
            ("health_check_period", 1000), ("health_check_timeout", 1000), ("health_check_max_retries", 1),
            ("health_check_retry_delay", 500), ("node_considered_unhealthy_timeout", 3000), ("primary_demote_timeout", 5000),
        ] {
            _ = try monitor("ALTER SYSTEM SET pgautofailover.\(name) = \(value)", user: "postgres")
        }
        _ = try monitor("SELECT pg_reload_conf()", user: "postgres")
        let monitorURL = "postgres://autoctl_node@127.0.0.1:\(monitorPort)/pg_auto_failover?sslmode=disable"
        for (index, port) in nodePorts.enumerated() {
            try keep(
                ["create", "postgres", "--pgdata", directory.file("node\(index)"), "--pgport", "\(port)", "--monitor", monitorURL],
                log: "node\(index)")
            let wanted = index == 0 ? "single" : "secondary"
            try wait("node \(index)", timeout: 90) { self.state(index) == wanted }
            try autoctl(["config", "set", "--pgdata", directory.file("node\(index)"), "timeout.network_partition_timeout", "3"])
        }
        try wait("the primary", timeout: 30) { self.state(0) == "primary" }
    }

    /// libpq's form: every node, the client finds the one that takes writes.
    public func url(host: String) -> String {
        "postgres://postgres@" + nodePorts.map { "\(host):\($0)" }.joined(separator: ",") + "/postgres"
    }

    /// SQL on whichever node takes writes now (psql, libpq's `target_session_attrs=read-write`).
    public func sql(_ statement: String) throws -> String {
        try psql(url(host: "127.0.0.1") + "?target_session_attrs=read-write&connect_timeout=2", statement)
    }

    /// The index of the node that takes writes now, if one does.
    public func primary() -> Int? {
        nodePorts.indices.first { index in
            (try? psql("postgres://postgres@127.0.0.1:\(nodePorts[index])/postgres?connect_timeout=1", "SHOW transaction_read_only")) == "off"
        }
    }

    /// Node `index`'s state as its keeper last reported it to the monitor.
    public func state(_ index: Int) -> String? {
        try? monitor("SELECT reportedstate FROM pgautofailover.node WHERE nodeport = \(nodePorts[index])")
    }

    /// Kills node `index`'s host, as far as this machine can: its keeper and its server, at once.
    public func kill(_ index: Int) {
        Self.signal(keeper: keepers[index + 1], SIGKILL)
    }

    public func stop() {
        for keeper in keepers.reversed() {
            Self.signal(keeper: keeper, SIGKILL)
        }
    }

    /// Signals the keeper and every process under it (the server among them) at once.
    private static func signal(keeper: Process, _ signal: Int32) {
        var all = [keeper.processIdentifier]
        var index = 0
        while index < all.count {
            let pid = all[index]
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8))?
                .split(separator: " ").compactMap { Int32($0) } ?? []
            all += children
            index += 1
        }
        for pid in all.reversed() { Foundation.kill(pid, signal) }
        for _ in 0..<100 where keeper.isRunning { usleep(20_000) }
    }

    private func monitor(_ statement: String, user: String = "autoctl_node") throws -> String {
        try psql("postgres://\(user)@127.0.0.1:\(monitorPort)/pg_auto_failover?connect_timeout=2", statement)
    }

    private func wait(_ what: String, timeout: Double, _ ready: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if ready() { return }
            Thread.sleep(forTimeInterval: 0.2)
        }
        throw FixtureError("pg_auto_failover: \(what) was not ready within \(Int(timeout)) s; logs in \(keptLogs())")
    }

    /// The keepers' logs copied where the temporary directory's removal leaves them.
    private func keptLogs() -> String {
        let kept = "/tmp/tonearm-paf-logs-\(Int(Date().timeIntervalSince1970))"
        try? FileManager.default.createDirectory(atPath: kept, withIntermediateDirectories: true)
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [] where name.hasSuffix(".log") {
            try? FileManager.default.copyItem(atPath: directory.file(name), toPath: kept + "/" + name)
        }
        return kept
    }

    /// `pg_autoctl … --run`, kept running: a keeper (or the monitor's), with its own log.
    private func keep(_ arguments: [String], log: String) throws {
        let process = try launch(
            arguments + ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run"], log: directory.file(log + ".log"))
        keepers.append(process)
    }

    private func autoctl(_ arguments: [String]) throws {
        let process = try launch(arguments, log: directory.file("autoctl.log"))
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw FixtureError("pg_autoctl \(arguments.joined(separator: " ")) failed") }
    }

    private func launch(_ arguments: [String], log: String) throws -> Process {
        let bin = PostgresServer.binaries ?? "/usr/lib/postgresql/15/bin"
        let environment = [
            "PATH=\(bin):/usr/bin:/bin", "XDG_CONFIG_HOME=\(directory.file("config"))", "XDG_DATA_HOME=\(directory.file("state"))",
        ]
        let process = Process()
        process.executableURL = URL(fileURLWithPath: asRoot ? "/usr/sbin/runuser" : "/usr/bin/env")
        process.arguments = (asRoot ? ["-u", "postgres", "--", "/usr/bin/env"] : []) + environment + ["/usr/bin/pg_autoctl"] + arguments
        if !FileManager.default.fileExists(atPath: log) { FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }

    private func psql(_ url: String, _ statement: String) throws -> String {
        try PostgresServer.psql(url, statement)
    }

    deinit { stop() }
}
