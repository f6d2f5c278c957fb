// Process figures both executables report in their `/health`.
import Foundation

public enum ResourceUsage {
    /// Resident memory of this process in bytes (Linux `/proc/self/statm`), 0 where unknown.
    public static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
