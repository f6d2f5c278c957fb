// The Router's index of sessions: packets and events from the engine are looked up here by id
// (O(1)) and handed to every subscribed client. Publishing never waits for a client; a client
// that falls behind loses its own frames, and one that keeps losing them is told to go, so it
// can never hold up anybody else. WebSocket clients are `ClientSink`s written on their own event
// loop: one task per event loop per message, not a task hop per client per frame.
import Foundation
import NIOCore
import Synchronization
import WireProtocol

/// A client's subscription to one session; iterate `messages`, then `cancel()` (or drop it).
package struct Subscription: Sendable {
    let sessionID: SessionID
    let token: UInt64
    package let messages: AsyncStream<ClientMessage>
}

/// Sessions by id, with their subscribers.
package final class SessionStore: Sendable {
    struct Subscriber: Sendable {
        enum Output: Sendable {
            /// A bounded stream read by the client's own task (`/listen`).
            case stream(AsyncStream<ClientMessage>.Continuation)
            /// Written on the client's event loop.
            case sink(any ClientSink)
            /// Written by another subscriber, a feed (a `/listen` listener, by its session's
            /// `ListenFeed`): handed no message here, told when the session moves.
            case fed(any MovableClient)
        }
        let output: Output
        let kind: ClientKind
        let since: Date
        /// Counted and listed as a client (a feed is not: its listeners are).
        var listed = true
        /// Called once, outside the lock's work, when the client has lost too many frames.
        let onSlow: @Sendable (String) -> Void
        var window: SlowClientWindow
        var slow = false
    }

    /// One session as the Router knows it.
    struct Entry: Sendable {
        var subscribers: [UInt64: Subscriber] = [:]
        /// The sink subscribers grouped by event loop, rebuilt when one comes or goes.
        var loops: [LoopGroup] = []
        var framesRouted: UInt64 = 0
        /// The `ready` of the track playing (its title and artist, for a listener who arrives mid-track).
        var lastTrackStart: WireEvent?
        /// The `ready` of the play being heard now (nil once it finished, or while paused): what
        /// a follower's client is told first, as if it had heard the track begin.
        var hearing: WireEvent?
        /// When the last client left (or the session became known).
        var lastSeen = ContinuousClock.now
        /// A session just handed over from another pair: its first frames here, for the clients
        /// that come over from that pair a moment after they were sent.
        var catchUp: CatchUp?
        /// The station this session follows (SessionStore+Stations): its clients are handed the
        /// station's frames and events, and its own frames are dropped.
        var station: SessionID?
        /// The sessions that follow this one, and their sinks merged with this one's (`loops`
        /// when it has no followers), and those of them with stream clients.
        var followers: Set<SessionID> = []
        var fanLoops: [LoopGroup] = []
        var streamFollowers: [SessionID] = []
        /// Routers of other pairs that relay this station to followers there (StationRelays).
        var remoteFollowers = 0
    }

    /// The frames a session sent since its hand-over, kept for a short while: a client that
    /// reconnects after the other pair's last frame gets them first, and hears nothing skipped.
    struct CatchUp: Sendable {
        var frames: [ByteBuffer] = []
        let until: ContinuousClock.Instant
        /// 300 ms: more than a client's reconnection takes; a client later than that hears the present.
        static let limit = 15
    }

    /// Sinks of one kind on one event loop: each message is encoded once for all of them.
    struct LoopGroup: Sendable {
        let loop: any EventLoop
        var sinks: [any ClientSink]
    }

    struct State {
        var entries: [SessionID: Entry] = [:]
        var nextToken: UInt64 = 1
        var counters = Counters()
    }

    /// Frames (20 ms each) a client may have waiting before its oldest are dropped.
    let clientBufferFrames: Int
    /// A client that loses more than `slowDropLimit` of `slowWindowFrames` frames in a row of
    /// windows is disconnected (defaults: 50 of 250, i.e. a fifth of 5 s of audio).
    let slowWindowFrames: Int
    let slowDropLimit: Int
    let state = Mutex(State())
    private let eventSink = Mutex<AsyncStream<WireEvent>.Continuation?>(nil)

    package init(clientBufferFrames: Int = 50, slowWindowFrames: Int = 250, slowDropLimit: Int = 50) {
        self.clientBufferFrames = clientBufferFrames
        self.slowWindowFrames = slowWindowFrames
        self.slowDropLimit = slowDropLimit
    }

    /// A new client's slow-client window.
    func newWindow() -> SlowClientWindow { SlowClientWindow(frames: slowWindowFrames, dropLimit: slowDropLimit) }

    /// Every event routed from now on is also yielded here (to the session controllers).
    /// The engine's last `load` report (every 10 s and on a change), nil until one came.
    private let lastLoad = Mutex<LoadReport?>(nil)
    var engineLoad: LoadReport? { lastLoad.withLock { $0 } }

    func forwardEvents(to continuation: AsyncStream<WireEvent>.Continuation) {
        eventSink.withLock { $0 = continuation }
    }

    /// Makes `id` known, so its packets are routed rather than dropped as unknown.
    package func register(_ id: SessionID) {
        state.withLock { state in
            if state.entries[id] == nil { state.entries[id] = Entry() }
        }
    }

    /// Forgets `id` (a stale session); its clients, if any, are finished.
    package func release(_ id: SessionID) {
        let entry = state.withLock { state in
            let entry = state.entries.removeValue(forKey: id)
            Self.forget(id, station: entry?.station, in: &state)
            return entry
        }
        for subscriber in entry?.subscribers.values ?? [:].values {
            if case .stream(let continuation) = subscriber.output { continuation.finish() }
        }
    }

    /// Keeps `id`'s frames from now until `until` for clients that join meanwhile (a hand-over).
    func keepCatchUp(_ id: SessionID, until: ContinuousClock.Instant) {
        state.withLock { $0.entries[id, default: Entry()].catchUp = CatchUp(until: until) }
    }

    /// Unsubscribes a client that is to connect again elsewhere (a relay whose Router stops),
    /// and from the next frame on keeps `id`'s frames for `keep` (unless they are kept from
    /// earlier already): that client, back a moment later, hears nothing skipped. One step under
    /// the lock, so the frames it was sent and those kept meet exactly.
    func unsubscribeKeepingCatchUp(_ id: SessionID, token: UInt64, keep: Duration) {
        let until = ContinuousClock.now + keep
        let subscriber = state.withLock { state -> Subscriber? in
            guard state.entries[id] != nil else { return nil }
            if state.entries[id]?.catchUp.map({ $0.until <= .now }) ?? true {
                state.entries[id]?.catchUp = CatchUp(until: until)
            }
            state.entries[id]?.lastSeen = .now
            guard let removed = state.entries[id]?.subscribers.removeValue(forKey: token) else { return nil }
            Self.regroup(id, changed: removed, added: false, in: &state)
            return removed
        }
        if case .stream(let continuation) = subscriber?.output { continuation.finish() }
    }

    /// Tells every client of `id` to connect again (the session moved to another pair); a
    /// listener's stream ends.
    func moveClients(of id: SessionID) {
        let subscribers = state.withLock { $0.entries[id]?.subscribers.values.map { $0 } ?? [] }
        for subscriber in subscribers {
            switch subscriber.output {
            case .stream(let continuation): continuation.finish()
            case .sink(let sink): sink.eventLoop.execute { sink.moved() }
            case .fed(let client): client.eventLoop.execute { client.moved() }
            }
        }
    }

    /// The session `id`, if known.
    func findBySessionId(_ id: SessionID) -> Entry? {
        state.withLock { $0.entries[id] }
    }

    var counters: Counters { state.withLock { $0.counters } }
    var sessionCount: Int { state.withLock { $0.entries.count } }
    var clientCount: Int { state.withLock { $0.entries.values.reduce(0) { $0 + $1.subscribers.values.count(where: \.listed) } } }

    /// The clients of `id` (a feed is not one: its listeners are).
    func subscriberCount(_ id: SessionID) -> Int { state.withLock { $0.entries[id]?.subscribers.values.count(where: \.listed) ?? 0 } }

    /// When the last client of `id` left (or when the session became known).
    func lastSeen(_ id: SessionID) -> ContinuousClock.Instant? { state.withLock { $0.entries[id]?.lastSeen } }

    /// Subscribes to `id`'s packets and events from now on.
    package func subscribe(
        _ id: SessionID, kind: ClientKind = .browser, onSlow: @escaping @Sendable (String) -> Void = { _ in }
    ) -> Subscription {
        let (stream, continuation) = AsyncStream<ClientMessage>.makeStream(
            bufferingPolicy: .bufferingNewest(clientBufferFrames))
        let token = add(
            Subscriber(output: .stream(continuation), kind: kind, since: Date(), onSlow: onSlow, window: newWindow()), to: id)
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id, token: token) }
        return Subscription(sessionID: id, token: token, messages: stream)
    }

    /// Subscribes a client written on its event loop; returns the token to unsubscribe with.
    /// The sink keeps its own slow-client window and reports through `noteSlowClient`.
    package func subscribe(_ id: SessionID, kind: ClientKind, sink: any ClientSink) -> UInt64 {
        add(Subscriber(output: .sink(sink), kind: kind, since: Date(), onSlow: { _ in }, window: newWindow()), to: id)
    }

    /// Subscribes a client that a feed writes for (a `/listen` listener): counted, listed and
    /// told of a move like any client, handed nothing here.
    func subscribe(_ id: SessionID, kind: ClientKind, client: any MovableClient) -> UInt64 {
        add(Subscriber(output: .fed(client), kind: kind, since: Date(), onSlow: { _ in }, window: newWindow()), to: id)
    }

    /// Subscribes a feed (`SessionFeeds`): handed every message, not counted (its clients are).
    func subscribeFeed(_ id: SessionID, sink: any ClientSink) -> UInt64 {
        var feed = Subscriber(output: .sink(sink), kind: .listener, since: Date(), onSlow: { _ in }, window: newWindow())
        feed.listed = false
        return add(feed, to: id)
    }

    private func add(_ subscriber: Subscriber, to id: SessionID) -> UInt64 {
        state.withLock { state in
            let token = state.nextToken
            state.nextToken += 1
            state.entries[id, default: Entry()].subscribers[token] = subscriber
            Self.regroup(id, changed: subscriber, added: true, in: &state)
            // Under the lock: a frame published after this reaches the client after these.
            if let catchUp = state.entries[id]?.catchUp, !catchUp.frames.isEmpty, catchUp.until > .now {
                switch subscriber.output {
                case .stream(let continuation):
                    for frame in catchUp.frames { continuation.yield(.audio(frame)) }
                case .sink(let sink):
                    let frames = catchUp.frames
                    sink.eventLoop.execute {
                        for frame in frames { sink.deliver(sink.encode(.audio(frame)), audio: true) }
                    }
                case .fed:
                    break
                }
            }
            Self.greet(subscriber, of: state.entries[id]!, in: state)
            return token
        }
    }

    package func unsubscribe(_ id: SessionID, token: UInt64) {
        let subscriber = state.withLock { state -> Subscriber? in
            state.entries[id]?.lastSeen = .now
            guard let removed = state.entries[id]?.subscribers.removeValue(forKey: token) else { return nil }
            Self.regroup(id, changed: removed, added: false, in: &state)
            return removed
        }
        if case .stream(let continuation) = subscriber?.output { continuation.finish() }
    }

    /// Groups the sinks by event loop and by kind: a group's message is encoded once, by its
    /// first sink, so a WebSocket client and a `/listen` listener on one loop are two groups
    /// (one would otherwise get the other's bytes: a WebSocket frame wrapped in an Ogg page).
    static func regroup(_ entry: inout Entry) {
        var groups: [LoopGroup] = []
        for subscriber in entry.subscribers.values {
            guard case .sink(let sink) = subscriber.output else { continue }
            let kind = ObjectIdentifier(type(of: sink))
            if let index = groups.firstIndex(where: { $0.loop === sink.eventLoop && ObjectIdentifier(type(of: $0.sinks[0])) == kind }) {
                groups[index].sinks.append(sink)
            } else {
                groups.append(LoopGroup(loop: sink.eventLoop, sinks: [sink]))
            }
        }
        entry.loops = groups
    }

    /// A sink dropped `frames` audio frames, and was disconnected for it when `disconnected`.
    package func noteSlowClient(droppedFrames frames: UInt64, disconnected: Bool) {
        state.withLock { state in
            state.counters.slowClientDrops += frames
            if disconnected { state.counters.slowClientDisconnects += 1 }
        }
    }

    /// Sends a JSON text message (a state change) to every client of `id`.
    func broadcast(_ id: SessionID, _ json: String) {
        let message = ClientMessage.event(json)
        let loops = state.withLock { state -> [LoopGroup] in
            for subscriber in state.entries[id]?.subscribers.values ?? [:].values {
                if case .stream(let continuation) = subscriber.output { continuation.yield(message) }
            }
            return state.entries[id]?.loops ?? []
        }
        Self.fanOut(message, audio: false, to: loops)
    }

    /// One task per event loop writes `message` to every sink on it.
    private static func fanOut(_ message: ClientMessage, audio: Bool, to loops: [LoopGroup]) {
        for group in loops {
            let bytes = group.sinks[0].encode(message)
            let sinks = group.sinks
            group.loop.execute {
                for sink in sinks { sink.deliver(bytes, audio: audio) }
            }
        }
    }

    /// Hands one message from the engine to the session's subscribers.
    package func route(_ message: WireMessage) {
        switch message {
        case .audio(let packet):
            publish(packet.sessionID, .audio(packet.payload), event: nil)
        case .event(let event, _) where event.type == .load:
            // The engine's own: no session's subscribers get it.
            lastLoad.withLock { $0 = event.load }
        case .event(let event, let line):
            // Passed on as the engine wrote it: the Router changes nothing in an engine event.
            publish(event.sessionID, .event(line), event: event)
            eventSink.withLock { _ = $0?.yield(event) }
        }
    }

    func publish(_ id: SessionID, _ message: ClientMessage, event: WireEvent?) {
        var slow: [(Subscriber, String)] = []
        let loops = state.withLock { state -> [LoopGroup] in
            guard state.entries[id] != nil else {
                if event == nil { state.counters.unknownSessionFrames += 1 }
                return []
            }
            // A follower's own frames and events (its play stopping as it began to follow) reach
            // none of its clients (its controller still gets the events).
            if state.entries[id]!.station != nil { return [] }
            if event == nil, state.entries[id]!.catchUp != nil, case .audio(let frame) = message {
                Self.keep(frame, in: &state.entries[id]!.catchUp)
            }
            // In place: copying the entry out and back would copy its subscriber table per frame.
            deliver(message, event: event, to: &state.entries[id]!, counters: &state.counters, slow: &slow)
            guard !state.entries[id]!.followers.isEmpty else { return state.entries[id]!.loops }
            for follower in state.entries[id]!.streamFollowers where state.entries[follower] != nil {
                deliver(message, event: event, to: &state.entries[follower]!, counters: &state.counters, slow: &slow)
            }
            // Empty until a follower's sink came (then the station's own groups and theirs).
            return state.entries[id]!.fanLoops.isEmpty ? state.entries[id]!.loops : state.entries[id]!.fanLoops
        }
        Self.fanOut(message, audio: event == nil, to: loops)
        for (subscriber, reason) in slow {
            if case .stream(let continuation) = subscriber.output { continuation.finish() }
            subscriber.onSlow(reason)
        }
    }

    private static func keep(_ frame: ByteBuffer, in catchUp: inout CatchUp?) {
        guard var kept = catchUp, kept.until > .now else {
            catchUp = nil
            return
        }
        catchUp = nil  // uniquely referenced while appending
        kept.frames.append(frame)
        if kept.frames.count > CatchUp.limit { kept.frames.removeFirst(kept.frames.count - CatchUp.limit) }
        catchUp = kept
    }

    /// Yields `message` to every subscriber of `entry` and keeps the slow-client windows. Walks the
    /// table by index so that updating a subscriber never copies the table.
    private func deliver(
        _ message: ClientMessage, event: WireEvent?, to entry: inout Entry, counters: inout Counters,
        slow: inout [(Subscriber, String)]
    ) {
        let isFrame = event == nil
        if let event { Self.note(event, in: &entry) }
        var index = entry.subscribers.startIndex
        while index != entry.subscribers.endIndex {
            defer { index = entry.subscribers.index(after: index) }
            guard !entry.subscribers.values[index].slow,
                case .stream(let continuation) = entry.subscribers.values[index].output
            else { continue }
            let lost: Bool
            if case .dropped = continuation.yield(message) { lost = true } else { lost = false }
            guard isFrame else { continue }
            if lost { counters.slowClientDrops += 1 }
            if case .tooSlow(_, let reason) = entry.subscribers.values[index].window.count(lost: lost) {
                entry.subscribers.values[index].slow = true
                counters.slowClientDisconnects += 1
                slow.append((entry.subscribers.values[index], reason))
            }
        }
        if isFrame {
            entry.framesRouted += 1
            counters.framesRouted += 1
        }
    }
}
