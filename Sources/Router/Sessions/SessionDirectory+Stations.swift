// Stations: a session follows another, and its clients hear that one. The store routes the
// station's frames and events to the follower's clients (SessionStore+Stations); the follower's
// controller stops what it played, keeps its queue, refuses its other commands until it
// unfollows, and stores whom it follows, so that it follows again after a restart (or on the
// pair that takes it on, in a cluster).
import HTTPTypes
import ServiceSupport
import WireProtocol

extension SessionDirectory {
    /// `id` follows `station` from now on (or follows it instead of another station).
    func follow(_ id: SessionID, station: SessionID) async throws(APIError) -> SessionView {
        // Both known, each with the station it was stored following (a chain is refused below). In
        // a cluster the station may play on another pair: its packets then come here, relayed
        // once for all its followers on this pair, and that pair refuses a station that follows.
        if let placeStation {
            if let refusal = store.followRefusal(id, station: station) { throw refusal }
            if try await placeStation(station) == .local { _ = await controller(for: station) }
        } else if !clustered {
            _ = await controller(for: station)
        }
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
