// The Router's index of sessions: packets and events from the engine are looked up here by id
// (O(1)) and handed to every subscribed client's own bounded buffer. Publishing never waits for
// a client; a client that falls behind loses its own oldest frames.
import NIOCore
import Synchronization
import WireProtocol

/// What a client receives: an Opus packet (binary message) or an event (text message).
enum ClientMessage: Sendable {
    case audio(ByteBuffer)
    case event(String)
}

/// A client's subscription to one session; iterate `messages`, then `cancel()` (or drop it).
struct Subscription: Sendable {
    let sessionID: SessionID
    let token: UInt64
    let messages: AsyncStream<ClientMessage>
}

/// Sessions by id, with their subscribers.
final class SessionStore: Sendable {
    /// One session as the Router knows it.
    struct Entry: Sendable {
        var subscribers: [UInt64: AsyncStream<ClientMessage>.Continuation] = [:]
        var framesRouted: UInt64 = 0
        var lastEvent: WireEvent?
        /// The engine play in progress on this session (from `ready` until `finished`).
        var activePlayID: UInt64?
    }

    struct Counters: Sendable, Equatable {
        /// Packets for a session the Router does not know; dropped.
        var unknownSessionFrames: UInt64 = 0
        /// Frames a slow client's buffer discarded.
        var slowClientDrops: UInt64 = 0
        var framesRouted: UInt64 = 0
    }

    private struct State {
        var entries: [SessionID: Entry] = [:]
        var nextToken: UInt64 = 1
        var counters = Counters()
    }

    /// Frames (20 ms each) a client may have waiting before its oldest are dropped.
    let clientBufferFrames: Int
    private let state = Mutex(State())

    init(clientBufferFrames: Int = 50) {
        self.clientBufferFrames = clientBufferFrames
    }

    /// Makes `id` known, so its packets are routed rather than dropped as unknown.
    func register(_ id: SessionID) {
        state.withLock { state in
            if state.entries[id] == nil { state.entries[id] = Entry() }
        }
    }

    /// The session `id`, if known.
    func findBySessionId(_ id: SessionID) -> Entry? {
        state.withLock { $0.entries[id] }
    }

    var counters: Counters { state.withLock { $0.counters } }

    /// Sessions with a play in progress, as the Router last heard from the engine.
    var activePlays: [SessionID: UInt64] {
        state.withLock { state in state.entries.compactMapValues(\.activePlayID) }
    }
    var sessionCount: Int { state.withLock { $0.entries.count } }
    var clientCount: Int { state.withLock { $0.entries.values.reduce(0) { $0 + $1.subscribers.count } } }

    /// Subscribes to `id`'s packets and events from now on.
    func subscribe(_ id: SessionID) -> Subscription {
        let (stream, continuation) = AsyncStream<ClientMessage>.makeStream(
            bufferingPolicy: .bufferingNewest(clientBufferFrames))
        let token = state.withLock { state in
            let token = state.nextToken
            state.nextToken += 1
            state.entries[id, default: Entry()].subscribers[token] = continuation
            return token
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id, token: token) }
        return Subscription(sessionID: id, token: token, messages: stream)
    }

    func unsubscribe(_ id: SessionID, token: UInt64) {
        let continuation = state.withLock { $0.entries[id]?.subscribers.removeValue(forKey: token) }
        continuation?.finish()
    }

    /// Hands one message from the engine to the session's subscribers.
    func route(_ message: WireMessage) {
        switch message {
        case .audio(let packet):
            publish(packet.sessionID, .audio(packet.payload), event: nil)
        case .event(let event):
            publish(event.sessionID, .event(event.jsonLine()), event: event)
        }
    }

    private func publish(_ id: SessionID, _ message: ClientMessage, event: WireEvent?) {
        let isFrame = event == nil
        state.withLock { state in
            guard var entry = state.entries[id] else {
                if isFrame { state.counters.unknownSessionFrames += 1 }
                return
            }
            if let event {
                entry.lastEvent = event
                if event.type == .ready { entry.activePlayID = event.playID }
                if event.type == .finished, entry.activePlayID == event.playID { entry.activePlayID = nil }
            }
            var dropped: UInt64 = 0
            for continuation in entry.subscribers.values {
                if case .dropped = continuation.yield(message) { dropped += 1 }
            }
            if isFrame {
                entry.framesRouted += 1
                state.counters.framesRouted += 1
            }
            state.counters.slowClientDrops += dropped
            state.entries[id] = entry
        }
    }
}
