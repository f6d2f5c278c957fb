// One upstream per session per Router (docs/cluster.md, "Any Router serves any client"): the
// WebSocket clients this Router relays to one session, by the same path and frames per message,
// share one connection to the session's owner. The owner's audio and events go to every one of
// them; a client's command goes up after a tag naming the client and carrying its own token
// (`RelayTag`), so the owner checks that client's rights and its answer comes back to that
// client alone. A client that joins a connected upstream is sent the session's state first, as
// the owner sends it to a connection of its own. The upstream follows the session from pair to
// pair (`ClusterRelay.follow`) and ends with its last client.
import Foundation
import Hummingbird
import HummingbirdWebSocket
import NIOWebSocket
import ServiceSupport
import Synchronization
import WireProtocol

/// What goes to one relayed client, in order: the owner's messages, then possibly a close.
enum RelayOutput: Sendable {
    case message(WebSocketMessage)
    case close(WebSocketErrorCode, String)
}

/// One relayed client of a shared upstream.
final class RelayMember: Sendable {
    let number: UInt64
    let token: String?
    let request: Request
    private let output: AsyncStream<RelayOutput>.Continuation
    /// It has been sent the session's state (the owner's first message on a connection, or the
    /// answer to its join): the session's audio and events go to it from then on.
    let joined = Atomic<Bool>(false)
    private let closed = Atomic<Bool>(false)
    /// Messages that may wait for a client before it is judged too slow: five seconds of audio.
    static let buffered = 256

    private init(number: UInt64, request: Request, output: AsyncStream<RelayOutput>.Continuation) {
        self.number = number
        self.request = request
        self.token = AccessControl.token(in: request)
        self.output = output
    }

    static func make(number: UInt64, request: Request) -> (RelayMember, AsyncStream<RelayOutput>) {
        let (stream, continuation) = AsyncStream<RelayOutput>.makeStream(bufferingPolicy: .bufferingNewest(buffered))
        return (RelayMember(number: number, request: request, output: continuation), stream)
    }

    /// Queues `message` for the client; one that lets `buffered` messages wait is closed, as a
    /// direct client that stays behind is (1008).
    func send(_ message: WebSocketMessage) {
        guard case .dropped = output.yield(.message(message)) else { return }
        close(.init(codeNumber: 1008), "too_slow: the client did not keep up with the session's audio")
    }

    /// Closes the client (once) after what is queued for it.
    func close(_ code: WebSocketErrorCode, _ reason: String) {
        guard !closed.exchange(true, ordering: .relaxed) else { return }
        output.yield(.close(code, reason))
        output.finish()
    }
}

/// The clients of one session relayed by this Router with the same path and frames per message,
/// and their one upstream to the owner while it is connected.
final class SharedUpstream: Sendable {
    struct Key: Hashable, Sendable {
        var session: SessionID
        /// `/ws` or `/bot`.
        var path: String
        var frames: Int
    }
    let key: Key

    private struct State {
        var members: [UInt64: RelayMember] = [:]
        var writer: WebSocketOutboundWriter?
        /// The connection now; messages of an earlier one (left while still open) are not passed on.
        var generation: UInt64 = 0
        /// The connected owner's first message (the session's state) has come.
        var stateSeen = false
        /// A bot's last `voice` command and its token (nil after `voice_leave`), sent first on
        /// every new upstream: the guild keeps its Discord voice when the session moves on, though
        /// the bot stays connected here and has no reason to send its credentials again.
        var voice: (text: String, token: String?)?
        var leaving = false
    }
    private let state = Mutex(State())

    init(key: Key) { self.key = key }

    var memberCount: Int { state.withLock { $0.members.count } }
    var firstRequest: Request? { state.withLock { $0.members.values.min { $0.number < $1.number }?.request } }
    var isLeaving: Bool { state.withLock { $0.leaving } }

    func add(_ member: RelayMember) { state.withLock { $0.members[member.number] = member } }

    /// Removes `member`; the number left.
    func remove(_ member: RelayMember) -> Int {
        state.withLock { state in
            state.members[member.number] = nil
            return state.members.count
        }
    }

    /// Closes every client (each after what is queued for it).
    func closeAll(_ code: WebSocketErrorCode, _ reason: String) {
        for member in state.withLock({ Array($0.members.values) }) { member.close(code, reason) }
    }

    // MARK: The connection

    /// A new connection to the owner: the voice credentials go first, then commands may. Returns
    /// the connection's generation, which its messages name.
    func connected(_ writer: WebSocketOutboundWriter) async throws -> UInt64 {
        if let voice = state.withLock({ $0.voice }) {
            try await writer.write(.text(RelayTag(relay: RelayTag.voice, token: voice.token).tagging(voice.text)))
        }
        return state.withLock { state in
            state.writer = writer
            return state.generation
        }
    }

    /// The connection ended, or was left: nobody has been sent the next owner's state yet.
    func disconnected() {
        state.withLock { state in
            state.generation &+= 1
            state.writer = nil
            state.stateSeen = false
            for member in state.members.values { member.joined.store(false, ordering: .relaxed) }
        }
    }

    /// A message from the owner on connection `generation`: an answer to one client, or the
    /// session's, to every client that has its state. The first of a connection is that state:
    /// every client present has it then. False: the connection was left (the session moved on,
    /// or its last client went), and is to be closed.
    func received(_ message: WebSocketMessage, generation: UInt64) -> Bool {
        if case .text(let text) = message, let (tag, body) = RelayTag.split(text) {
            let (current, member) = state.withLock { state in
                (state.generation == generation, UInt64(tag.relay).flatMap { state.members[$0] })
            }
            guard current else { return false }
            guard let member else { return true }
            if tag.join == true { member.joined.store(true, ordering: .relaxed) }
            member.send(.text(body))
            return true
        }
        let members = state.withLock { state -> [RelayMember]? in
            guard state.generation == generation else { return nil }
            if !state.stateSeen {
                state.stateSeen = true
                for member in state.members.values { member.joined.store(true, ordering: .relaxed) }
            }
            return state.members.values.filter { $0.joined.load(ordering: .relaxed) }
        }
        guard let members else { return false }
        for member in members { member.send(message) }
        return true
    }

    /// The last client left: the connection is closed (the owner would otherwise send on).
    func closeUpstream() {
        let writer = state.withLock { state in
            state.generation &+= 1
            return state.writer
        }
        guard let writer else { return }
        Task { try? await writer.close(.normalClosure, reason: nil) }
    }

    /// A client that came while the upstream is connected asks the owner for the state.
    func requestJoin(_ member: RelayMember) async {
        let writer = state.withLock { state in
            state.stateSeen && !member.joined.load(ordering: .relaxed) ? state.writer : nil
        }
        _ = try? await writer?.write(.text(RelayTag(relay: "\(member.number)", token: member.token, join: true).tagging("")))
    }

    /// Sends a client's command up, tagged; false while no upstream is connected.
    func send(_ text: String, from member: RelayMember) async -> Bool {
        if key.path == "/bot" { remember(text, token: member.token) }
        guard let writer = state.withLock({ $0.writer }) else { return false }
        return (try? await writer.write(.text(RelayTag(relay: "\(member.number)", token: member.token).tagging(text)))) != nil
    }

    /// The Router stops: the owner is asked to end the upstream after the frames on their way
    /// (their catch-up kept for the clients' next connections); false when none is connected.
    func leave() async -> Bool {
        let writer = state.withLock { state in
            state.leaving = true
            return state.writer
        }
        guard let writer else { return false }
        return (try? await writer.write(.text(ClusterRelay.leaveMessage))) != nil
    }

    private func remember(_ text: String, token: String?) {
        guard text.contains("voice"), let data = text.data(using: .utf8),
            let command = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any], let op = command["op"] as? String
        else { return }
        if op == "voice_leave" {
            state.withLock { $0.voice = nil }
        } else if op == "voice" {
            state.withLock { $0.voice = (text, token) }
        }
    }
}
