// Stations: a session follows another, and its clients hear that one. The store routes the
// station's frames and events to the follower's clients (SessionStore+Stations); the follower's
// controller stops what it played, keeps its queue, refuses its other commands until it
// unfollows, and stores whom it follows, so that it follows again after a restart.
import HTTPTypes
import ServiceSupport
import WireProtocol

extension SessionDirectory {
    /// `id` follows `station` from now on (or follows it instead of another station).
    func follow(_ id: SessionID, station: SessionID) async throws(APIError) -> SessionView {
        guard !clustered else {
            throw APIError(
                status: .notImplemented, code: "stations_not_clustered",
                message: "a cluster's pairs do not offer stations yet: a station and its followers may be played by different pairs")
        }
        // Both known, each with the station it was stored following (a chain is refused below).
        _ = await controller(for: station)
        _ = await controller(for: id)
        let previous = store.station(of: id)
        try store.follow(id, station: station)
        do {
            return try await using(id) { try await $0.perform(.follow(station: station)) }
        } catch {
            if let previous { try? store.follow(id, station: previous) } else { store.unfollow(id) }
            throw (error as? APIError) ?? .internalError
        }
    }

    /// `id` follows no station: its own queue is in charge again (stopped where it was).
    func unfollow(_ id: SessionID) async throws(APIError) -> SessionView {
        do {
            let state = try await using(id) { try await $0.perform(.unfollow) }
            store.unfollow(id)
            return state
        } catch {
            throw (error as? APIError) ?? .internalError
        }
    }
}
