// The loudness of tracks measured on earlier plays, by URL: a later play of the same track
// knows its gain from its first frame, as if the track were tagged, and skips the meter. An Opus
// source within 0.5 LU of the target then stays passed through.
import Synchronization

/// Measured loudness by track URL, for this engine's lifetime; the oldest go past `capacity`.
final class LoudnessMemory: Sendable {
    struct Entry {
        var loudness: Double
        /// Seconds of audible sound it was measured over.
        var seconds: Double
        /// When it was stored, by the memory's own count: the oldest go first.
        var stamp: UInt64
    }

    /// A measurement kept is at least this long, unless it covers the whole track.
    static let minimumSeconds = 30.0
    /// A whole track shorter than that still has to have settled the gain.
    static let minimumWholeSeconds = LoudnessNormalizer.settlingSeconds

    let capacity: Int
    private let entries = Mutex<(table: [String: Entry], next: UInt64)>(([:], 0))

    init(capacity: Int = 10_000) {
        self.capacity = max(capacity, 1)
    }

    /// The loudness measured for `url` before, if any.
    func loudness(for url: String) -> Double? {
        entries.withLock { $0.table[url]?.loudness }
    }

    /// Keeps a measurement: the whole track's (`whole`) from a few seconds on, part of one from
    /// `minimumSeconds` on; a longer measurement replaces a shorter one, a whole track's any.
    func remember(_ url: String, loudness: Double, seconds: Double, whole: Bool) {
        guard loudness.isFinite, seconds >= (whole ? Self.minimumWholeSeconds : Self.minimumSeconds) else { return }
        entries.withLock { state in
            if let known = state.table[url], known.seconds > seconds, !whole { return }
            state.next &+= 1
            state.table[url] = Entry(loudness: loudness, seconds: whole ? .infinity : seconds, stamp: state.next)
            guard state.table.count > capacity else { return }
            // Over capacity: the oldest tenth goes (sorting once per tenth of the capacity).
            let cut = state.table.values.map(\.stamp).sorted()[max(capacity / 10, 1) - 1]
            state.table = state.table.filter { $0.value.stamp > cut }
        }
    }

    var count: Int { entries.withLock { $0.table.count } }
}
