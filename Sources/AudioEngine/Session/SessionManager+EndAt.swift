// Where a session's current play ends, asked for (`POST /session/{id}/end_at`, Lavalink's
// `endTime`): the pacer's tick ends it there, `finished`, as if its track ran out.
import EngineAPI
import HTTPTypes
import ServiceSupport
import Synchronization
import WireProtocol

extension SessionManager {
    func endAt(sessionID: SessionID, positionMS: Int64?, playID: UInt64? = nil) throws(APIError) -> SessionInfo {
        try state.withLock { state throws(APIError) -> SessionInfo in
            guard var session = state.sessions[sessionID] else { throw Self.unknown(sessionID) }
            guard session.playback != nil, let current = session.machine.playID else {
                throw APIError(status: .conflict, code: "nothing_playing", message: "session \"\(sessionID)\" plays nothing to end")
            }
            if let playID, playID != current {
                throw APIError(
                    status: .conflict, code: "stale_play", message: "play \(playID) is no longer the session's current play (now \(current))")
            }
            session.endAtMS = positionMS
            state.sessions[sessionID] = session
            return session.info(sessionID, complexity: render.complexity)
        }
    }
}
