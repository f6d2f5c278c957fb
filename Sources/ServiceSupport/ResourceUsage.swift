// Process figures both executables report in their `/health`.
import Foundation
#if canImport(CDispatch)
    import CDispatch  // where `timespec` comes from when Foundation is imported, with MemberImportVisibility
#endif
import Glibc

public enum ResourceUsage {
    /// Resident memory of this process in bytes (Linux `/proc/self/statm`), 0 where unknown.
    public static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// CPU seconds (user + system, all threads) this process has used.
    public static func cpuSeconds() -> Double {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// CPU seconds the calling thread has used.
    public static func threadCPUSeconds() -> Double {
        var time = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time) == 0 else { return 0 }
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// The cores this process may use: its cgroup's CPU quota (`cpu.max`, cgroup v2) where one is
    /// set, else the processors it may run on.
    public static func availableCores() -> Double {
        let processors = Double(max(ProcessInfo.processInfo.activeProcessorCount, 1))
        guard let text = try? String(contentsOfFile: "/sys/fs/cgroup/cpu.max", encoding: .utf8) else { return processors }
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count == 2, let quota = Double(fields[0]), let period = Double(fields[1]), quota > 0, period > 0
        else { return processors }
        return min(quota / period, processors)
    }

    /// The host's CPU time so far, in clock ticks summed over its processors: what the hypervisor
    /// took from it (steal) and all of it (`/proc/stat`'s first line); nil where it cannot be read.
    public static func hostCPUTicks() -> (stolen: UInt64, total: UInt64)? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n", maxSplits: 1).first, line.hasPrefix("cpu ")
        else { return nil }
        // user nice system idle iowait irq softirq steal (guest time is already in user's).
        let ticks = line.split(separator: " ").dropFirst().prefix(8).compactMap { UInt64($0) }
        guard ticks.count == 8 else { return nil }
        return (ticks[7], ticks.reduce(0, &+))
    }

    /// The share of the host's CPU time the hypervisor took between two readings of
    /// `hostCPUTicks` (0 when either is missing or no time passed).
    public static func stolenShare(
        from earlier: (stolen: UInt64, total: UInt64)?, to later: (stolen: UInt64, total: UInt64)?
    ) -> Double {
        guard let earlier, let later, later.total > earlier.total, later.stolen >= earlier.stolen else { return 0 }
        return Double(later.stolen - earlier.stolen) / Double(later.total - earlier.total)
    }

    private static func seconds(_ time: timeval) -> Double {
        Double(time.tv_sec) + Double(time.tv_usec) / 1e6
    }
}
