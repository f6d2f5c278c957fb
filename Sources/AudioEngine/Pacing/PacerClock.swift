// The pacer's time: a clock it can be given (tests script one), and the system's monotonic clock
// with absolute sleeps.
import Foundation
#if canImport(CDispatch)
    import CDispatch  // where `timespec` comes from when Foundation is imported, with MemberImportVisibility
#endif
import Glibc

/// Monotonic time and sleeping until an absolute instant; injectable for tests.
protocol PacerClock: Sendable {
    /// Nanoseconds on a monotonic clock.
    func now() -> UInt64
    func sleep(until deadline: UInt64)
}

/// CLOCK_MONOTONIC with `clock_nanosleep(TIMER_ABSTIME)`, so sleeps never accumulate drift.
struct MonotonicClock: PacerClock {
    func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    func sleep(until deadline: UInt64) {
        var ts = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nil) == EINTR {}
    }
}
