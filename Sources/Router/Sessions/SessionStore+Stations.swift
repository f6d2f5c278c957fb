// Stations: a session that follows another (its station) hands its clients the station's frames
// and events, and the engine does nothing for it. The station's entry keeps its sinks merged with
// every follower's by event loop and kind (`fanLoops`), so a frame is still one task per event
// loop and one encoding per group, however many sessions follow. A follower's sink joins or leaves
// that merge by itself; the whole merge is made again only when the station's own clients change
// or a session stops following.
import HTTPTypes
import NIOCore
import ServiceSupport
import Synchronization
import WireProtocol

extension SessionStore {
    /// Makes `id` follow `station` (or another station instead of the one it followed). Refused
    /// when that would make a chain: a station follows nobody, and a followed session follows
    /// nobody. Both are made known if they were not.
    func follow(_ id: SessionID, station: SessionID) throws(APIError) {
        let refusal = state.withLock { state -> APIError? in
            if let refusal = Self.refusal(id, station, in: state) { return refusal }
            let previous = state.entries[id]?.station
            if previous == station { return nil }
            state.entries[station, default: Entry()].followers.insert(id)
            state.entries[id, default: Entry()].station = station
            Self.forget(id, station: previous, in: &state)
            // Its sinks join the station's merge one by one (a full merge per follow would make
            // thousands of follows cost the square of their number).
            let entry = state.entries[id]!
            for group in entry.loops {
                for sink in group.sinks { Self.fanAdd(sink, to: &state.entries[station]!) }
            }
            if entry.subscribers.values.contains(where: { if case .stream = $0.output { true } else { false } }) {
                state.entries[station]!.streamFollowers.append(id)
            }
            for subscriber in entry.subscribers.values { Self.greet(subscriber, of: entry, in: state) }
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Why `id` may not follow `station` as things are here, if it may not (a cluster's pair asks
    /// before it looks for a station another pair plays; `follow` asks again).
    func followRefusal(_ id: SessionID, station: SessionID) -> APIError? {
        state.withLock { Self.refusal(id, station, in: $0) }
    }

    private static func refusal(_ id: SessionID, _ station: SessionID, in state: State) -> APIError? {
        if id == station {
            // Well formed (the id is valid), but not a station for this session: a conflict.
            return APIError(status: .conflict, code: "follows_itself", message: "a session cannot follow itself")
        }
        if let further = state.entries[station]?.station {
            return APIError(
                status: .conflict, code: "station_follows", message: "\(station) follows \(further) itself; follow \(further) instead")
        }
        let followers = (state.entries[id]?.followers.count ?? 0) + (state.entries[id]?.remoteFollowers ?? 0)
        guard followers == 0 else {
            return APIError(
                status: .conflict, code: "session_followed",
                message: "\(followers) sessions (or pairs relaying it) follow \(id); a station cannot follow another")
        }
        return nil
    }

    /// `id` follows no station any more: its clients hear its own frames again.
    func unfollow(_ id: SessionID) {
        state.withLock { state in
            guard let station = state.entries[id]?.station else { return }
            state.entries[id]!.station = nil
            Self.forget(id, station: station, in: &state)
        }
    }

    /// Another pair's Router relays `id` to its followers there: the station `id` follows, if it
    /// does (the relay is refused: no chains); else counted until `leaveRemoteFollowers`, and `id`
    /// may not follow meanwhile.
    func joinRemoteFollowers(_ id: SessionID) -> SessionID? {
        state.withLock { state in
            if let further = state.entries[id]?.station { return further }
            state.entries[id, default: Entry()].remoteFollowers += 1
            return nil
        }
    }

    func leaveRemoteFollowers(_ id: SessionID) {
        state.withLock { state in
            guard state.entries[id] != nil else { return }
            state.entries[id]!.remoteFollowers = max(state.entries[id]!.remoteFollowers - 1, 0)
        }
    }

    /// The `ready` of what `id` plays now (nil when nothing is heard).
    func hearing(of id: SessionID) -> WireEvent? { state.withLock { $0.entries[id]?.hearing } }

    /// A station another pair plays, relayed here (StationRelays): its packets and events reach
    /// its followers' clients as its engine's would, and nothing else (no controller here).
    func relayStation(_ id: SessionID, _ message: ClientMessage, event: WireEvent?) {
        publish(id, message, event: event)
    }

    /// The station `id` follows, if any.
    func station(of id: SessionID) -> SessionID? { state.withLock { $0.entries[id]?.station } }

    /// How many sessions follow `id`.
    func followerCount(_ id: SessionID) -> Int { state.withLock { $0.entries[id]?.followers.count ?? 0 } }

    /// Keeps what a session's events say is heard now.
    static func note(_ event: WireEvent, in entry: inout Entry) {
        switch event.type {
        case .ready:
            entry.lastTrackStart = event
            entry.hearing = event
        case .finished where event.playID == entry.hearing?.playID, .paused: entry.hearing = nil
        case .resumed: entry.hearing = entry.lastTrackStart
        default: break
        }
    }

    /// A play stored as going on when the Router starts (`SessionDirectory.restore`): its
    /// `ready`, unless one came since; the clients of its followers are told of it.
    func noteStillPlaying(_ ready: WireEvent) {
        let id = ready.sessionID
        state.withLock { state in
            guard state.entries[id] != nil, state.entries[id]!.hearing == nil else { return }
            state.entries[id]!.hearing = ready
            state.entries[id]!.lastTrackStart = state.entries[id]!.lastTrackStart ?? ready
            for follower in state.entries[id]!.followers {
                guard let entry = state.entries[follower] else { continue }
                for subscriber in entry.subscribers.values { Self.greet(subscriber, of: entry, in: state) }
            }
        }
    }

    /// A follower's new client hears the station's track begin: the `ready` of what the station
    /// plays now (a bot sets its speaking flag on it), in order before the station's next frame.
    static func greet(_ subscriber: Subscriber, of entry: Entry, in state: State) {
        guard let station = entry.station, let ready = state.entries[station]?.hearing else { return }
        let message = ClientMessage.event(ready.jsonLine())
        switch subscriber.output {
        case .stream(let continuation): continuation.yield(message)
        case .sink(let sink): sink.eventLoop.execute { sink.deliver(sink.encode(message), audio: false) }
        case .fed: break  // its feed is a sink of the same session, greeted itself
        }
    }

    /// Takes `id` out of `station`'s followers (it stopped following, or is gone).
    static func forget(_ id: SessionID, station: SessionID?, in state: inout State) {
        guard let station, state.entries[station]?.followers.remove(id) != nil else { return }
        mergeFollowers(of: station, in: &state)
    }

    /// Groups `id`'s sinks again after `subscriber` came or went. A station's merge is made again
    /// when one of its own clients comes or goes; a follower's client is added to (or taken from)
    /// its station's merge alone, so that thousands of followers connecting cost each the same.
    static func regroup(_ id: SessionID, changed subscriber: Subscriber, added: Bool, in state: inout State) {
        guard state.entries[id] != nil else { return }
        regroup(&state.entries[id]!)
        if !state.entries[id]!.followers.isEmpty { mergeFollowers(of: id, in: &state) }
        guard let station = state.entries[id]!.station, state.entries[station] != nil else { return }
        switch subscriber.output {
        case .sink(let sink):
            if added { fanAdd(sink, to: &state.entries[station]!) } else { fanRemove(sink, from: &state.entries[station]!) }
        case .stream:
            let streams = state.entries[id]!.subscribers.values.contains { if case .stream = $0.output { true } else { false } }
            state.entries[station]!.streamFollowers.removeAll { $0 == id }
            if streams { state.entries[station]!.streamFollowers.append(id) }
        case .fed:
            break
        }
    }

    /// Adds a follower's sink to its station's merged groups (made from the station's own first,
    /// if they were empty).
    static func fanAdd(_ sink: any ClientSink, to station: inout Entry) {
        if station.fanLoops.isEmpty { station.fanLoops = station.loops }
        let kind = ObjectIdentifier(type(of: sink))
        if let index = station.fanLoops.firstIndex(where: { $0.loop === sink.eventLoop && ObjectIdentifier(type(of: $0.sinks[0])) == kind }) {
            station.fanLoops[index].sinks.append(sink)
        } else {
            station.fanLoops.append(LoopGroup(loop: sink.eventLoop, sinks: [sink]))
        }
    }

    static func fanRemove(_ sink: any ClientSink, from station: inout Entry) {
        for index in station.fanLoops.indices {
            guard let at = station.fanLoops[index].sinks.firstIndex(where: { $0 === sink }) else { continue }
            station.fanLoops[index].sinks.remove(at: at)
            if station.fanLoops[index].sinks.isEmpty { station.fanLoops.remove(at: index) }
            return
        }
    }

    /// The station's own sink groups and its followers', merged by event loop and kind.
    static func mergeFollowers(of station: SessionID, in state: inout State) {
        guard let entry = state.entries[station] else { return }
        guard !entry.followers.isEmpty else {
            state.entries[station]!.fanLoops = []
            state.entries[station]!.streamFollowers = []
            return
        }
        var groups = entry.loops
        var streams: [SessionID] = []
        for follower in entry.followers {
            guard let followed = state.entries[follower] else { continue }
            for group in followed.loops {
                let kind = ObjectIdentifier(type(of: group.sinks[0]))
                if let index = groups.firstIndex(where: { $0.loop === group.loop && ObjectIdentifier(type(of: $0.sinks[0])) == kind }) {
                    groups[index].sinks += group.sinks
                } else {
                    groups.append(group)
                }
            }
            if followed.subscribers.values.contains(where: { if case .stream = $0.output { true } else { false } }) {
                streams.append(follower)
            }
        }
        state.entries[station]!.fanLoops = groups
        state.entries[station]!.streamFollowers = streams
    }
}
