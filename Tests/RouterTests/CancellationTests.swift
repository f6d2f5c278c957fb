// The two small pieces background work is built on: a value that arrives once (`Eventual`),
// waited for briefly or cancelled, and a signal that cancels work it runs (`CancellationSignal`).
import ServiceSupport
import NIOConcurrencyHelpers
import Testing

@Suite struct CancellationTests {
    @Test func aValueArrivesOnceForEveryWaiter() async throws {
        let value = Eventual<Int>()
        let first = Task { await value.wait() }
        let second = Task { await value.wait() }
        try await Task.sleep(for: .milliseconds(20))
        #expect(value.set(1))
        #expect(!value.set(2), "a second set changes nothing")
        #expect(await first.value == 1)
        #expect(await second.value == 1)
        #expect(value.value == 1)
        #expect(await value.wait() == 1, "a late waiter finds it at once")
    }

    @Test func aBriefWaitEndsWithoutTheValue() async throws {
        let value = Eventual<Int>()
        #expect(await value.value(within: .milliseconds(30)) == nil)
        value.set(7)
        #expect(await value.value(within: .milliseconds(30)) == 7)
    }

    @Test func aCancelledWaiterStopsWaiting() async throws {
        let value = Eventual<Int>()
        let waiter = Task { await value.wait() }
        try await Task.sleep(for: .milliseconds(20))
        waiter.cancel()
        #expect(await waiter.value == nil)
        value.set(3)
    }

    /// The work is cancelled where it waits (a request, a subprocess), and `run` ends with it.
    @Test func firingCancelsTheWorkItRuns() async throws {
        let signal = CancellationSignal()
        let sawCancellation = NIOLockedValueBox(false)
        let run = Task {
            try await signal.run {
                do {
                    try await Task.sleep(for: .seconds(60))
                } catch {
                    sawCancellation.withLockedValue { $0 = true }
                    throw error
                }
            }
        }
        try await Task.sleep(for: .milliseconds(20))
        let fired = ContinuousClock.now
        signal.fire()
        await #expect(throws: CancellationError.self) { try await run.value }
        #expect(ContinuousClock.now - fired < .seconds(30))
        #expect(sawCancellation.withLockedValue { $0 })
        await #expect(throws: CancellationError.self) { try await signal.run { 1 } }
    }

    @Test func workThatEndsFirstIsAnswered() async throws {
        let signal = CancellationSignal()
        #expect(try await signal.run { 42 } == 42)
        #expect(!signal.isFired)
    }
}
