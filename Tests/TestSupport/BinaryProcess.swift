// Starts the real AudioEngine and Router executables for end-to-end tests, and stops or kills
// them like an operator (or a crash) would.
import Foundation
import Synchronization

/// A running executable of this package, its output captured to a log file.
public final class BinaryProcess: @unchecked Sendable {
    // @unchecked: `process` is only started and signalled, and Foundation's Process is
    // thread-safe for those calls.
    public let name: String
    public let logPath: String
    private let process: Process

    /// The directory holding the package's built executables (beside the test bundle).
    public static var binaryDirectory: String {
        if let explicit = ProcessInfo.processInfo.environment["TONEARM_BIN_DIR"] { return explicit }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [bundle, bundle.deletingLastPathComponent()] {
            if FileManager.default.isExecutableFile(atPath: candidate.appendingPathComponent("AudioEngine").path) {
                return candidate.path
            }
        }
        return bundle.path
    }

    /// `launcher` runs it through another command that execs it (`ip netns exec <ns>`).
    public init(
        _ name: String, arguments: [String] = [], environment: [String: String], logDirectory: String,
        launcher: [String] = []
    ) throws {
        self.name = name
        let executable = Self.binaryDirectory + "/" + name
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw FixtureError("\(executable) is missing: run `swift build` before the end-to-end tests")
        }
        logPath = logDirectory + "/\(name)-\(UUID().uuidString.prefix(8)).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process = Process()
        if launcher.isEmpty {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = launcher + [executable] + arguments
        }
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardOutput = log
        process.standardError = log
        try process.run()
        LiveChildren.add(process.processIdentifier)
    }

    public var isRunning: Bool { process.isRunning }
    public var pid: Int32 { process.processIdentifier }
    public var exitCode: Int32 { process.terminationStatus }

    /// SIGTERM, then waits up to `timeout` for the exit.
    @discardableResult
    public func terminate(timeout: Duration = .seconds(5)) async -> Bool {
        guard process.isRunning else { return true }
        process.terminate()
        return await waitForExit(timeout: timeout)
    }

    /// SIGKILL: a crash as far as everyone else can tell.
    public func kill() async {
        guard process.isRunning else { return }
        Foundation.kill(process.processIdentifier, SIGKILL)
        _ = await waitForExit(timeout: .seconds(5))
    }

    public func waitForExit(timeout: Duration) async -> Bool {
        let exited = await eventually(timeout: timeout) { !process.isRunning }
        if exited { LiveChildren.remove(process.processIdentifier) }
        return exited
    }

    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }
}

/// Children still running when the test process exits are killed, so a test whose clean-up task
/// never ran (the process ended first) leaves no engine or Router behind.
enum LiveChildren {
    private static let pids = Mutex<Set<Int32>>([])
    private static let hook: Void = { atexit { LiveChildren.killAll() } }()

    static func add(_ pid: Int32) {
        _ = hook
        pids.withLock { _ = $0.insert(pid) }
    }

    static func remove(_ pid: Int32) {
        pids.withLock { _ = $0.remove(pid) }
    }

    static func killAll() {
        for pid in pids.withLock({ $0 }) { kill(pid, SIGKILL) }
    }
}
