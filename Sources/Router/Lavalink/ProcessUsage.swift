// The host's and this process's use of memory and CPU, for Lavalink's `stats` (read from /proc).
import Foundation

struct ProcessUsage: Sendable {
    private var last: (cpu: Double, at: ContinuousClock.Instant)?

    /// This process's share of the host's CPU since the last call (0 to 1); 0 the first time.
    mutating func cpuShare() -> Double {
        let now = ContinuousClock.now
        let cpu = Self.cpuSeconds()
        defer { last = (cpu, now) }
        guard let last else { return 0 }
        let wall = Double((now - last.at).components.attoseconds) / 1e18 + Double((now - last.at).components.seconds)
        guard wall > 0 else { return 0 }
        return min(max((cpu - last.cpu) / wall / Double(max(ProcessInfo.processInfo.activeProcessorCount, 1)), 0), 1)
    }

    /// utime + stime of this process, in seconds.
    static func cpuSeconds() -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return 0 }
        // After the command's closing parenthesis: state is field 3; utime and stime are 14 and 15.
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(max(sysconf(Int32(_SC_CLK_TCK)), 1))
    }

    /// Bytes: this process's resident memory, the host's available and total memory.
    static func memory() -> (used: Int64, free: Int64, total: Int64) {
        let page = Int64(max(sysconf(Int32(_SC_PAGESIZE)), 1))
        let statm = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8))?.split(separator: " ")
        let used = statm.flatMap { $0.count > 1 ? Int64($0[1]) : nil }.map { $0 * page } ?? 0
        var free: Int64 = 0
        var total: Int64 = 0
        for line in ((try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8)) ?? "").split(separator: "\n") {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            guard parts.count >= 2, let kilobytes = Int64(parts[1]) else { continue }
            if parts[0] == "MemTotal:" { total = kilobytes * 1_024 }
            if parts[0] == "MemAvailable:" { free = kilobytes * 1_024 }
        }
        return (used, free, total)
    }
}
