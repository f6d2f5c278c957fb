// Work a request starts but does not wait for (resolving a page with yt-dlp after `play` has
// answered, a track the Router resolves after answering its caller), run as child tasks of one
// service: shutdown cancels it and waits for it, instead of leaving tasks (and their
// subprocesses) behind. A job may also have an owner that cancels it alone (`CancellationSignal`).
import ServiceLifecycle

/// A service that runs the work handed to it as its own child tasks.
package final class BackgroundTasks: Service, Sendable {
    private let work: AsyncStream<@Sendable () async -> Void>
    private let submit: AsyncStream<@Sendable () async -> Void>.Continuation

    package init() {
        (work, submit) = AsyncStream.makeStream()
    }

    /// Runs `job` as a child task of `run()`; dropped once the service has shut down.
    package func spawn(_ job: @escaping @Sendable () async -> Void) {
        submit.yield(job)
    }

    /// Runs `job` as a child task of `run()`, cancelled when `owner` fires (at once if it has).
    package func spawn(owner: CancellationSignal, _ job: @escaping @Sendable () async -> Void) {
        spawn { try? await owner.run(job) }
    }

    package func run() async {
        await withDiscardingTaskGroup { group in
            // On shutdown, no new work is taken and what runs is cancelled; the group waits for it.
            await withGracefulShutdownHandler {
                for await job in work { group.addTask(operation: job) }
            } onGracefulShutdown: { [submit] in
                submit.finish()
            }
            group.cancelAll()
        }
    }
}
