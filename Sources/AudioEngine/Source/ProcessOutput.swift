// A subprocess run to its end without blocking a thread (yt-dlp): its output, its exit status,
// and its death with the task that waits for it.
import Foundation
import NIOConcurrencyHelpers

/// A finished subprocess.
struct ProcessOutput: Sendable {
    var status: Int32
    var standardOutput: Data
    var standardError: String

    struct Timeout: Error, CustomStringConvertible {
        var description: String { "timed out" }
    }

    /// Runs `executable` (looked up on PATH) without blocking a thread while it runs.
    static func run(_ executable: String, arguments: [String], timeout: Duration) async throws -> ProcessOutput {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [executable] + arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let expired = Flag()
        let exit = ProcessExit()
        process.terminationHandler = { exit.finish($0.terminationStatus) }
        try process.run()
        let pid = process.processIdentifier
        // Each pipe is read to its end on a thread of its own, from the start: a child that writes
        // more than a pipe holds is not blocked, and nothing it wrote can be missed at its exit
        // (a readability handler still running when the exit was seen once lost yt-dlp's answer).
        async let standardOutput = readToEnd(out.fileHandleForReading)
        async let standardError = readToEnd(err.fileHandleForReading)
        // SIGKILL: the child inherits the spawning thread's signal mask, which may block SIGTERM.
        // The process dies with the task that waits for it (a cancelled play, the engine's shutdown),
        // and is waited for even then.
        let status = await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { group -> Int32 in
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    guard !Task.isCancelled else { return }
                    expired.set()
                    kill(pid, SIGKILL)
                }
                let status = await exit.wait()
                group.cancelAll()
                return status
            }
        } onCancel: {
            kill(pid, SIGKILL)
        }
        let (stdout, stderr) = await (standardOutput, standardError)
        if expired.isSet { throw Timeout() }
        try Task.checkCancellation()
        return ProcessOutput(status: status, standardOutput: stdout, standardError: String(decoding: stderr, as: UTF8.self))
    }

    /// What a pipe carries until every writer has closed it, read off Swift's cooperative pool.
    private static func readToEnd(_ handle: FileHandle) async -> Data {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: handle.readDataToEndOfFile()) }
        }
    }
}

/// A subprocess's exit status, waited for without regard to cancellation (the waiter kills it
/// first when cancelled, so the wait is short).
///
/// A pthread mutex (NIO's), not `Synchronization.Mutex`: the exit and the waiter contend for it,
/// and ThreadSanitizer cannot see the Mutex's contended futex path (it reported the locked
/// accesses as a race, as it did for the playback outbox).
final class ProcessExit: Sendable {
    private let state = NIOLockedValueBox<(status: Int32?, waiter: CheckedContinuation<Int32, Never>?)>((nil, nil))

    func finish(_ status: Int32) {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Int32, Never>? in
            state.status = status
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: status)
    }

    func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            let status = state.withLockedValue { state -> Int32? in
                if state.status == nil { state.waiter = continuation }
                return state.status
            }
            if let status { continuation.resume(returning: status) }
        }
    }
}

/// A mark that one task sets and another reads after it.
final class Flag: Sendable {
    private let value = NIOLockedValueBox(false)
    func set() { value.withLockedValue { $0 = true } }
    var isSet: Bool { value.withLockedValue { $0 } }
}
