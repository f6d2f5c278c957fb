// Positions and timestamps come from clients (a seek, a start) and from sources (a packet's pts,
// a container's start time), and both may hold any 64-bit value. Kept inside ±2^40 ms (about 35
// years), every sum, difference and ×48 (ms → samples at 48 kHz) on them fits in an Int64.

/// Bounds for positions, so arithmetic on them cannot trap.
package enum MediaTime {
    /// The furthest position the engine accepts or computes with: 2^40 ms, about 35 years.
    package static let maxMS: Int64 = 1 << 40

    /// `ms` limited to ±`maxMS`.
    static func clamped(_ ms: Int64) -> Int64 { min(max(ms, -maxMS), maxMS) }

    /// `ms` (clamped) in samples at 48 kHz.
    static func samples(ms: Int64) -> Int64 { clamped(ms) * 48 }

    /// `a - b` without trapping: the exact difference of clamped values.
    static func difference(_ a: Int64, _ b: Int64) -> Int64 {
        let (result, overflow) = a.subtractingReportingOverflow(b)
        return overflow ? (a < b ? Int64.min : Int64.max) : result
    }

    /// `a + b` without trapping, saturating at the ends of Int64.
    static func sum(_ a: Int64, _ b: Int64) -> Int64 {
        let (result, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b < 0 ? Int64.min : Int64.max) : result
    }
}
