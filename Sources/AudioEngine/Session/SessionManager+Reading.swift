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
            return session.info(sessionID)
        }
    }

    /// Sessions listed per hold of the lock: the tick waits for at most one chunk's copy.
    static let listChunk = 128

    /// Every session, sorted by id. Read a chunk at a time and sorted outside the lock, so a
    /// listing of thousands of sessions never holds the pacer's tick for longer than its own work.
    func list() -> [SessionInfo] {
        let ids = state.withLock { Array($0.sessions.keys) }
        var infos: [(key: String, info: SessionInfo)] = []
        infos.reserveCapacity(ids.count)
        for start in stride(from: 0, to: ids.count, by: Self.listChunk) {
            let chunk = ids[start..<min(start + Self.listChunk, ids.count)]
            let listed = state.withLock { state in
                chunk.compactMap { id in state.sessions[id].map { $0.info(id) } }
            }
            for info in listed { infos.append((info.sessionID.description, info)) }
        }
        return infos.sorted { $0.key < $1.key }.map(\.info)
    }

    var totals: FrameCounters { state.withLock { $0.totals } }

    /// Session counts by state.
    var countsByState: [SessionState: Int] {
        state.withLock { state in
            var counts = Dictionary(uniqueKeysWithValues: SessionState.allCases.map { ($0, 0) })
            for session in state.sessions.values { counts[session.machine.state, default: 0] += 1 }
            return counts
        }
    }
}
