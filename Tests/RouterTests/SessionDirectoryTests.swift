// Releasing stale sessions against what is using them: a command in flight or a client on its
// way to subscribing keeps its session (and so its controller, which the engine's events reach).
import Logging
import Synchronization
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct SessionDirectoryTests {
    @Test func aSessionInUseIsNotReleasedUnderIt() async throws {
        let directory = SessionDirectory(
            store: SessionStore(), engine: ScriptedEngine(), database: nil, writer: nil, logger: Logger(label: "test"))
        let id = try SessionID("joining")
        let first = try await directory.using(id) { $0 }
        // A client is between getting the controller and subscribing while the sweep runs.
        let (entered, enter) = AsyncStream<Void>.makeStream()
        let (leave, leaving) = AsyncStream<Void>.makeStream()
        let joining = Task {
            try await directory.using(id) { controller in
                enter.yield()
                for await _ in leave { break }
                return controller
            }
        }
        for await _ in entered { break }
        await directory.releaseStale(idleFor: .zero)
        #expect(await directory.released == 0, "released while in use")
        #expect(await directory.existing(id) === first)
        leaving.yield()
        #expect(try await joining.value === first)
        // Once nobody uses it, it goes.
        try await Task.sleep(for: .milliseconds(5))
        await directory.releaseStale(idleFor: .zero)
        #expect(await directory.released == 1)
        #expect(await directory.existing(id) == nil)
    }
}
