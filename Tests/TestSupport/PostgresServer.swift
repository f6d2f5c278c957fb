// A real PostgreSQL server for the cluster tests: Debian's binaries, a fresh data directory under
// /tmp, trust authentication on loopback and an ephemeral port; run as the `postgres` user when
// the tests run as root (PostgreSQL refuses to run as root).
import Foundation

/// What the cluster tests need of their database: where the pairs reach it, SQL on it, its end.
public protocol ClusterDatabaseServer: AnyObject, Sendable {
    func url(host: String) -> String
    func sql(_ statement: String) throws -> String
    func stop()
}

public final class PostgresServer: ClusterDatabaseServer, @unchecked Sendable {
    // @unchecked: the process is started once and only signalled afterwards.
    public let directory: TemporaryDirectory
    public let port: Int
    private let process: Process
    private let logPath: String

    public var url: String { url(host: "127.0.0.1") }
    public func url(host: String) -> String { "postgres://tonearm@\(host):\(port)/postgres" }

    /// The newest installed server's binaries (`/usr/lib/postgresql/<version>/bin`).
    public static var binaries: String? {
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return versions.compactMap(Int.init).sorted().last.map { "\(root)/\($0)/bin" }
            .flatMap { FileManager.default.isExecutableFile(atPath: $0 + "/postgres") ? $0 : nil }
    }

    /// `alsoListenOn`: an address beside loopback (the host's side of a network namespace's link),
    /// with trust for its /16.
    public init(alsoListenOn extra: String? = nil) throws {
        guard let bin = Self.binaries else { throw FixtureError("PostgreSQL is not installed (apt-get install postgresql)") }
        directory = try TemporaryDirectory(prefix: "tonearm-pg")
        port = try freePort()
        let data = directory.file("data")
        logPath = directory.file("postgres.log")
        let asRoot = getuid() == 0
        if asRoot {
            chmod(directory.path, 0o777)
        }
        try Self.run(asRoot, bin + "/initdb", ["-D", data, "-U", "tonearm", "--auth=trust", "--no-sync", "-E", "UTF8"], log: logPath)
        if let extra {
            let parts = extra.split(separator: ".")
            let network = parts.count == 4 ? "\(parts[0]).\(parts[1]).0.0/16" : "\(extra)/32"
            let hba = try FileHandle(forWritingTo: URL(fileURLWithPath: data + "/pg_hba.conf"))
            hba.seekToEndOfFile()
            hba.write(Data("host all all \(network) trust\n".utf8))
            try hba.close()
        }
        process = Process()
        let server = [bin + "/postgres", "-D", data, "-p", "\(port)", "-k", directory.path, "-c", "listen_addresses=127.0.0.1\(extra.map { "," + $0 } ?? "")",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "max_connections=200"]
        process.executableURL = URL(fileURLWithPath: asRoot ? "/usr/sbin/runuser" : server[0])
        process.arguments = asRoot ? ["-u", "postgres", "--"] + server : Array(server.dropFirst())
        FileManager.default.createFile(atPath: logPath + ".server", contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath + ".server"))
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if (try? Self.run(asRoot, bin + "/pg_isready", ["-h", "127.0.0.1", "-p", "\(port)", "-q"], log: logPath)) != nil { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        stop()
        throw FixtureError("PostgreSQL did not start: \(serverLog.suffix(2000))")
    }

    public var serverLog: String { (try? String(contentsOfFile: logPath + ".server", encoding: .utf8)) ?? "" }

    /// SQL through psql, answering its rows as text (`-At`).
    public func sql(_ statement: String) throws -> String {
        try Self.psql("postgres://tonearm@127.0.0.1:\(port)/postgres", statement)
    }

    /// `statement` through psql on the server `url` names (libpq's URL), its rows as text (`-At`).
    static func psql(_ url: String, _ statement: String) throws -> String {
        guard let bin = Self.binaries else { throw FixtureError("no psql") }
        let pipe = Pipe()
        let psql = Process()
        psql.executableURL = URL(fileURLWithPath: bin + "/psql")
        psql.arguments = [url, "-At", "-c", statement]
        psql.standardOutput = pipe
        psql.standardError = FileHandle.nullDevice
        try psql.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        psql.waitUntilExit()
        guard psql.terminationStatus == 0 else { throw FixtureError("psql failed: \(statement)") }
        return String(decoding: output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// SIGSTOP (`true`) or SIGCONT to the postmaster and every backend: the server's host as a
    /// client sees it when cut off, its connections open and silent.
    public func freeze(_ frozen: Bool) {
        let pidFile = directory.file("data/postmaster.pid")
        guard let postmaster = (try? String(contentsOfFile: pidFile, encoding: .utf8))?.split(separator: "\n").first.flatMap({ Int32($0) })
        else { return }
        let backends = (try? String(contentsOfFile: "/proc/\(postmaster)/task/\(postmaster)/children", encoding: .utf8))?
            .split(separator: " ").compactMap { Int32($0) } ?? []
        for pid in [postmaster] + backends { kill(pid, frozen ? SIGSTOP : SIGCONT) }
    }

    /// Stops the server at once (SIGQUIT to the postmaster: its immediate shutdown; nothing here
    /// needs to survive it). `runuser` passes no signal on, so the postmaster's own pid is used.
    /// Polls rather than `waitUntilExit`, which spins a core while it waits.
    public func stop() {
        guard process.isRunning else { return }
        let pidFile = directory.file("data/postmaster.pid")
        let postmaster = (try? String(contentsOfFile: pidFile, encoding: .utf8))?.split(separator: "\n").first.flatMap { Int32($0) }
        if let postmaster { kill(postmaster, SIGQUIT) } else { kill(process.processIdentifier, SIGTERM) }
        for _ in 0..<100 where process.isRunning { usleep(50_000) }
        if process.isRunning {
            if let postmaster { kill(postmaster, SIGKILL) }
            kill(process.processIdentifier, SIGKILL)
            for _ in 0..<40 where process.isRunning { usleep(50_000) }
        }
    }

    private static func run(_ asRoot: Bool, _ executable: String, _ arguments: [String], log: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: asRoot ? "/usr/sbin/runuser" : executable)
        process.arguments = asRoot ? ["-u", "postgres", "--", executable] + arguments : arguments
        FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw FixtureError("\(executable) exited with \(process.terminationStatus)") }
    }

    deinit { stop() }
}
