// What the session store counts for operators: its counters, and the clients of a session
// (`/health`, `/metrics`, `/health/session/{id}`).
import Foundation
import Synchronization
import WireProtocol

extension SessionStore {
    struct Counters: Sendable, Equatable {
        /// Packets for a session the Router does not know (or no longer knows); dropped as stale.
        var unknownSessionFrames: UInt64 = 0
        /// Frames a slow client's buffer discarded.
        var slowClientDrops: UInt64 = 0
        /// Clients disconnected for staying behind.
        var slowClientDisconnects: UInt64 = 0
        var framesRouted: UInt64 = 0
    }

    /// Other Routers' relays of the stations this Router's sessions are (each counts once per
    /// station it follows, however many followers stand behind it).
    var remoteFollowerCount: Int {
        state.withLock { state in state.entries.values.reduce(0) { $0 + $1.remoteFollowers } }
    }

    /// One client, as `/health/session/{id}` shows it.
    struct ClientInfo: Sendable, Codable {
        var kind: ClientKind
        var connectedSeconds: Double
        enum CodingKeys: String, CodingKey {
            case kind
            case connectedSeconds = "connected_seconds"
        }
    }

    var clientsByKind: [ClientKind: Int] {
        state.withLock { state in
            var counts = Dictionary(uniqueKeysWithValues: ClientKind.allCases.map { ($0, 0) })
            for entry in state.entries.values {
                for subscriber in entry.subscribers.values where subscriber.listed { counts[subscriber.kind, default: 0] += 1 }
            }
            return counts
        }
    }

    func clients(of id: SessionID) -> [ClientInfo] {
        let now = Date()
        return state.withLock { state in
            (state.entries[id]?.subscribers.values ?? [:].values)
                .filter(\.listed)
                .map { ClientInfo(kind: $0.kind, connectedSeconds: now.timeIntervalSince($0.since)) }
                .sorted { $0.connectedSeconds > $1.connectedSeconds }
        }
    }
}
