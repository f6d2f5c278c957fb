// Which pair a session without an owner goes to: the live pair with the lowest score, in the
// spirit of Lavalink's penalties (docs/cluster.md): one point per session it owns, a CPU penalty
// that grows steeply as the host's load nears its cores, and one point per 30 late frames it
// reported in the last minute. A pair at its TONEARM_MAX_SESSIONS, or draining, gets none.
import Foundation

enum LoadScore {
    static func score(_ pair: ClusterDatabase.Pair) -> Double {
        score(sessions: Double(pair.sessions), load: pair.load, lateFrames: Double(pair.lateFrames))
    }

    static func score(sessions: Double, load: Double, lateFrames: Double) -> Double {
        sessions + cpuPenalty(load) + lateFrames / 30
    }

    /// The CPU term: 0 when idle, 6.3 at a tenth of the budget, 105 at half, 1,305 at all of it.
    static func cpuPenalty(_ load: Double) -> Double {
        pow(1.05, 100 * min(max(load, 0), 2)) * 10 - 10
    }

    /// The pair to give `session` to. Equal scores are common (pairs start empty, placements
    /// made at once see the same counts), so ties go by a hash of the session and the pair
    /// (rendezvous hashing): every pair picks the same one for a session, and sessions placed at
    /// once spread over the tied pairs instead of all going to the first by name.
    /// A pair whose engine refuses new plays (`engine_full` in its load report) gets one only
    /// when every pair does; so does a pair whose heartbeats have not come steadily for a lease
    /// (back from a cut, or just started: its rounds may fail again before it can renew).
    static func best(of pairs: [ClusterDatabase.Pair], for session: String) -> ClusterDatabase.Pair? {
        var candidates = pairs.filter { !$0.draining && $0.sessions < $0.maxSessions }
        for preferred in [\ClusterDatabase.Pair.admitting, \.steady] {
            let kept = candidates.filter { $0[keyPath: preferred] }
            if !kept.isEmpty { candidates = kept }
        }
        return candidates.min { (score($0), rank(session, $0.id)) < (score($1), rank(session, $1.id)) }
    }

    /// FNV-1a of the session and pair names: the same on every pair and every run.
    static func rank(_ session: String, _ pair: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in session.utf8 + [0] + pair.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return hash
    }

    /// The host's one-minute load average per core (0 = idle, 1 = every core busy).
    static func hostLoad() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8),
            let first = text.split(separator: " ").first, let load = Double(first)
        else { return 0 }
        return load / Double(max(ProcessInfo.processInfo.activeProcessorCount, 1))
    }
}
