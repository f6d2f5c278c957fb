// Who gets a core first when the cores are short: the pacer (real-time where the system allows
// it), then the event loops, the control API and the openers, then the encoding workers, which
// run at a higher nice value. Workers that lose their core briefly only use up their lead; a
// pacer that loses it makes every session's frame late.
import Foundation
import Glibc
import Logging

enum ThreadPriority {
    /// Moves the calling thread to `SCHED_FIFO` at `priority` (1–99). Returns nil when done, else
    /// the error number (`EPERM` without `CAP_SYS_NICE`, or where the real-time budget is zero).
    static func makeRealtime(priority: Int32) -> Int32? {
        var parameters = sched_param(sched_priority: priority)
        let result = pthread_setschedparam(pthread_self(), SCHED_FIFO, &parameters)
        return result == 0 ? nil : result
    }

    /// Names the calling thread and puts it in `SCHED_FIFO` at `priority` where allowed (nil:
    /// normal scheduling), saying in the log which it got.
    static func prioritize(_ name: String, priority: Int32?, logger: Logger) {
        Self.name(name)
        guard let priority else {
            logger.info("\(name) thread at normal scheduling (TONEARM_PACER_PRIORITY=0)")
            return
        }
        if let error = makeRealtime(priority: priority) {
            logger.notice(
                "\(name) thread at normal scheduling: SCHED_FIFO was refused",
                metadata: [
                    "errno": "\(error)",
                    "hint": "grant CAP_SYS_NICE or an rtprio limit (Docker: ulimits rtprio) for real-time pacing",
                ])
        } else {
            logger.info("\(name) thread at SCHED_FIFO", metadata: ["priority": "\(priority)"])
        }
    }

    /// Gives the calling thread the nice value `nice` unless it has it already; raising it needs
    /// no privilege. On Linux a nice value belongs to a thread, and process id 0 names the calling
    /// one. A thread pool's threads are not ours to start, so each job calls this: one
    /// `getpriority` when nothing is to be done.
    static func ensureNice(_ nice: Int32) {
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        errno = 0
        let current = getpriority(which, 0)
        guard current != nice || errno != 0 else { return }
        _ = setpriority(which, 0, nice)
        name("tonearm-worker")
    }

    /// Names the calling thread as `top -H` and `/proc/<pid>/task/*/comm` show it (15 bytes at most).
    /// Written to the kernel too: Foundation's `Thread.name` alone once left the pacer's thread
    /// (named before it started) with another thread's name in `comm` (CI at 52a0a03,
    /// SchedulingEndToEndTests), and `pthread_setname_np` is not visible to Swift here.
    static func name(_ name: String) {
        Thread.current.name = name
        let file = open("/proc/thread-self/comm", O_WRONLY)
        guard file >= 0 else { return }
        defer { close(file) }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBufferPointer { write(file, $0.baseAddress, $0.count) }
    }
}
