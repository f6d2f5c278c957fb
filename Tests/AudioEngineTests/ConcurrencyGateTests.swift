// The gate in front of yt-dlp runs and source opens: waiters are admitted in order, one place
// per owner, a full queue and a wait that runs out are refused at once with 503 `resolver_busy`,
// and neither a timed-out nor a cancelled waiter keeps a place or a queue slot.
import Foundation
import HTTPTypes
import Synchronization
import ServiceSupport
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct ConcurrencyGateTests {
    @Test func waitersAreAdmittedInOrderAndAFullQueueIsRefused() async throws {
        let gate = ConcurrencyGate("tests", limits: .init(limit: 1, queueLimit: 2, maxWait: .seconds(30)))
        try await gate.acquire()
        let order = OrderLog()
        let first = Task { try await gate.acquire(); order.append(1) }
        while await gate.load.waiting < 1 { await Task.yield() }
        let second = Task { try await gate.acquire(); order.append(2) }
        while await gate.load.waiting < 2 { await Task.yield() }
        let refused = await #expect(throws: APIError.self) { try await gate.acquire() }
        #expect(refused?.code == "resolver_busy" && refused?.status == .serviceUnavailable)

        await gate.release()
        try await first.value
        await gate.release()
        try await second.value
        #expect(order.values == [1, 2])
        await gate.release()
        #expect(await gate.load == (0, 0))
    }

    /// A session holds one place at a time: its second waits for its first even with places free,
    /// while another session's goes ahead; the first's release hands its place on.
    @Test func anOwnerHoldsOnePlaceAtATime() async throws {
        let gate = ConcurrencyGate("tests", limits: .init(limit: 3, queueLimit: 4, maxWait: .seconds(30)))
        try await gate.acquire(owner: "a")
        let order = OrderLog()
        let second = Task { try await gate.acquire(owner: "a"); order.append(2) }
        while await gate.load.waiting < 1 { await Task.yield() }
        try await gate.acquire(owner: "b")
        #expect(await gate.load == (2, 1), "b went ahead of a's second; a's second still waits")
        order.append(1)
        await gate.release(owner: "a")
        try await second.value
        #expect(order.values == [1, 2])
        #expect(await gate.load == (2, 0))
        await gate.release(owner: "a")
        await gate.release(owner: "b")
        #expect(await gate.load == (0, 0))
    }

    @Test func aWaitThatRunsOutIsRefusedAndLeavesNothingBehind() async throws {
        let gate = ConcurrencyGate("tests", limits: .init(limit: 1, queueLimit: 4, maxWait: .milliseconds(50)))
        try await gate.acquire()
        let started = ContinuousClock.now
        let error = await #expect(throws: APIError.self) { try await gate.acquire() }
        #expect(error?.code == "resolver_busy")
        // Not a timing test (parallel tests may hold the cooperative threads for seconds): only
        // that the wait ends on its own rather than at the holder's release.
        #expect(ContinuousClock.now - started < .seconds(60))
        #expect(await gate.load == (1, 0))
        await gate.release()
        #expect(await gate.load == (0, 0), "the timed-out waiter must not have been handed the place")
    }

    @Test func aCancelledWaiterStopsWaiting() async throws {
        let gate = ConcurrencyGate("tests", limits: .init(limit: 1, queueLimit: 4, maxWait: .seconds(60)))
        try await gate.acquire()
        let waiter = Task { try await gate.acquire() }
        while await gate.load.waiting < 1 { await Task.yield() }
        waiter.cancel()
        await #expect(throws: APIError.self) { try await waiter.value }
        #expect(await gate.load == (1, 0))
        await gate.release()
        #expect(await gate.load == (0, 0))
    }

    /// A yt-dlp run dies with the task waiting for it (a replaced play, the engine's shutdown)
    /// instead of running on to its timeout.
    @Test func aCancelledSubprocessIsKilled() async throws {
        let marker = "tonearm-gate-test-\(UInt32.random(in: 0 ... .max))"
        let run = Task {
            try await ProcessOutput.run(
                "python3", arguments: ["-c", "import time; time.sleep(300)  # \(marker)"], timeout: .seconds(60))
        }
        // Generous: parallel tests may keep the cooperative threads busy for seconds.
        #expect(await eventually(timeout: .seconds(30)) { Self.running(marker) })
        let cancelled = ContinuousClock.now
        run.cancel()
        await #expect(throws: (any Error).self) { try await run.value }
        #expect(ContinuousClock.now - cancelled < .seconds(30), "killed, not left to run its 300 s")
        #expect(!Self.running(marker))
    }

    /// What a subprocess writes just before it exits is all there, every time: yt-dlp's answer is
    /// its last line (CI once saw a resolve fail with "no usable description" when the exit was
    /// noticed while the line was still being read), and it may be larger than a pipe holds.
    @Test func everythingAProcessWritesBeforeItExitsIsReturned() async throws {
        for run in 0..<500 {
            let output = try await ProcessOutput.run(
                "sh", arguments: ["-c", "echo out \(run); echo err \(run) >&2"], timeout: .seconds(30))
            #expect(String(decoding: output.standardOutput, as: UTF8.self) == "out \(run)\n")
            #expect(output.standardError == "err \(run)\n")
            if output.standardOutput.isEmpty { break }
        }
        let large = try await ProcessOutput.run(
            "python3", arguments: ["-c", "import sys; sys.stdout.write('x' * 1_000_000); sys.stderr.write('y' * 200_000)"],
            timeout: .seconds(30))
        #expect(large.status == 0 && large.standardOutput.count == 1_000_000 && large.standardError.utf8.count == 200_000)
    }

    static func running(_ marker: String) -> Bool { processIsRunning(commandLineContaining: marker) }
}

final class OrderLog: Sendable {
    private let log = Mutex<[Int]>([])
    func append(_ value: Int) { log.withLock { $0.append(value) } }
    var values: [Int] { log.withLock { $0 } }
}
