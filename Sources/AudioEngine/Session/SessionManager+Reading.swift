// What the manager tells about its sessions: one, all of them (a chunk per hold of the lock),
// and the counts the metrics and health read.
import EngineAPI
import ServiceSupport
import Synchronization
import WireProtocol

extension SessionManager {
    func info(sessionID: SessionID) throws(APIError) -> SessionInfo {
        try state.withLock { state throws(APIError) -> SessionInfo in
            guard let session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            return session.info(sessionID, complexity: render.complexity)
        }
    }

    /// Sessions listed per hold of the lock: the tick waits for at most one chunk's copy.
    static let listChunk = 128

    /// Every session, sorted by id. Read a chunk at a time and sorted outside the lock, so a
    /// listing of thousands of sessions never holds the pacer's tick for longer than its own work.
    func list() -> [SessionInfo] {
        let ids = state.withLock { Array($0.sessions.keys) }
        let complexity = render.complexity
        var infos: [(key: String, info: SessionInfo)] = []
        infos.reserveCapacity(ids.count)
        for start in stride(from: 0, to: ids.count, by: Self.listChunk) {
            let chunk = ids[start..<min(start + Self.listChunk, ids.count)]
            let listed = state.withLock { state in
                chunk.compactMap { id in state.sessions[id].map { $0.info(id, complexity: complexity) } }
            }
            for info in listed { infos.append((info.sessionID.description, info)) }
        }
        return infos.sorted { $0.key < $1.key }.map(\.info)
    }

    var totals: FrameCounters { state.withLock { $0.totals } }

    /// What the load governor reads: plays by kind now, and its frame counters so far.
    struct LoadCounts {
        var transcoding = 0
        var passthrough = 0
        var layers = 0
        var tight: UInt64 = 0
        var late: UInt64 = 0
        var transcodedFrames: UInt64 = 0
    }

    func loadCounts() -> LoadCounts {
        state.withLock { state in
            let plays = Self.playCounts(state)
            return LoadCounts(
                transcoding: plays.transcoding, passthrough: plays.passthrough, layers: plays.layers, tight: state.tightFrames,
                late: state.totals.nulled &+ state.totals.deficit, transcodedFrames: state.transcodedFrames)
        }
    }

    /// Plays being heard or opening, by kind, and the layers over them: one not yet open counts
    /// as transcoding (what it costs is not known until it is), and so does one with a layer (it
    /// is mixed and encoded while the layer lasts); a paused one costs nothing and is not counted.
    static func playCounts(_ state: State) -> (transcoding: Int, passthrough: Int, layers: Int) {
        var transcoding = 0, passthrough = 0, layers = 0
        for session in state.sessions.values where session.playback != nil && session.machine.state != .paused {
            if session.passthrough && session.playStarted && session.layers.isEmpty { passthrough += 1 } else { transcoding += 1 }
            layers += session.layers.count
        }
        return (transcoding, passthrough, layers)
    }

    /// The engine's load report, with the live counts.
    func loadReport() -> LoadReport {
        let counts = state.withLock { Self.playCounts($0) }
        return load.report(transcoding: counts.transcoding, passthrough: counts.passthrough, layers: counts.layers)
    }

    /// Queues an engine event for the next tick.
    func enqueue(_ event: WireEvent) {
        state.withLock { $0.pendingEvents.append(event) }
    }

    /// Seconds on the monotonic clock (what the load governor times its steps by).
    static func monotonicSeconds() -> Double {
        let now = ContinuousClock.now - Self.epoch
        return Double(now.components.seconds) + Double(now.components.attoseconds) / 1e18
    }
    private static let epoch = ContinuousClock.now

    /// Session counts by state.
    var countsByState: [SessionState: Int] {
        state.withLock { state in
            var counts = Dictionary(uniqueKeysWithValues: SessionState.allCases.map { ($0, 0) })
            for session in state.sessions.values { counts[session.machine.state, default: 0] += 1 }
            return counts
        }
    }
}
