// One Lavalink session: a client's WebSocket (`/v4/websocket`) and the players it made, kept for
// `timeout` seconds after the socket closes when the client asked for resuming. Messages meant
// for a client that is away are queued (at most `maxQueued`) and sent, in order, when it resumes;
// without resuming, its players are destroyed when the socket closes, as Lavalink does.
import Foundation
import Synchronization
import WireProtocol

final class LavalinkSession: Sendable {
    let id: String
    /// The bot's Discord user id (the `User-Id` header): the voice connections' user.
    let userID: String

    static let maxQueued = 1_000

    private struct State {
        var outbound: AsyncStream<String>.Continuation?
        var generation: UInt64 = 0
        var resuming = false
        var timeoutSeconds = 60
        var queued: [String] = []
        var players: [SessionID: LavalinkPlayer] = [:]
        /// Whether the last socket to take the session over was its client's (else a feed of its
        /// home's, in a cluster).
        var home = true
    }
    private let state = Mutex(State())

    init(id: String, userID: String) {
        self.id = id
        self.userID = userID
    }

    /// A new id: 16 lowercase letters and digits, as Lavalink's look.
    static func newID() -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<16).map { _ in alphabet.randomElement() ?? "a" })
    }

    /// Sends `message` to the client, or queues it while the client is away and may resume.
    func send(_ message: String) {
        state.withLock { state in
            if let outbound = state.outbound {
                outbound.yield(message)
            } else if state.resuming, state.queued.count < Self.maxQueued {
                state.queued.append(message)
            }
        }
    }

    /// A socket takes the session over (a new one, or the client resuming): `ready` first, then
    /// what was queued meanwhile. Returns the socket's generation, which `detach` names. In a
    /// cluster, a feed to the session's home (`home` false) takes it over as its client would,
    /// without the `ready`.
    func attach(_ outbound: AsyncStream<String>.Continuation, resumed: Bool, home: Bool = true) -> UInt64 {
        state.withLock { state in
            state.outbound?.finish()
            state.outbound = outbound
            state.generation += 1
            state.home = home
            if home { outbound.yield(LavalinkJSON.text(["op": "ready", "resumed": resumed, "sessionId": id])) }
            for message in state.queued { outbound.yield(message) }
            state.queued.removeAll()
            return state.generation
        }
    }

    /// The socket of `generation` closed. Whether the session waits for the client to resume
    /// (and for how long); false: it ends now.
    func detach(_ generation: UInt64) -> (resuming: Bool, timeout: Int)? {
        state.withLock { state in
            guard state.generation == generation else { return nil }
            state.outbound = nil
            return (state.resuming, state.timeoutSeconds)
        }
    }

    /// Whether a client is connected to the session now, and under which generation.
    var generation: UInt64? { state.withLock { $0.outbound == nil ? nil : $0.generation } }

    /// The last generation given, connected or not.
    var lastGeneration: UInt64 { state.withLock { $0.generation } }

    /// In a cluster, this pair's part of a session whose client is at another Router: it keeps
    /// its players' messages for its home's feed.
    func becomePart() {
        state.withLock { state in
            state.home = false
            state.resuming = true
        }
    }

    /// Whether the client's socket was the last to take the session over here.
    var isHome: Bool { state.withLock { $0.home } }

    /// Whether the client asked for the session to be kept when its socket closes.
    var resuming: Bool { state.withLock { $0.resuming } }

    /// `PATCH /v4/sessions/{id}`: the values after the update.
    func configure(resuming: Bool?, timeout: Int?) -> (resuming: Bool, timeout: Int) {
        state.withLock { state in
            if let resuming { state.resuming = resuming }
            if let timeout { state.timeoutSeconds = timeout }
            return (state.resuming, state.timeoutSeconds)
        }
    }

    var players: [LavalinkPlayer] { state.withLock { Array($0.players.values) } }

    func player(_ guild: SessionID) -> LavalinkPlayer? { state.withLock { $0.players[guild] } }

    /// The guild's player, made (by `make`) when it has none.
    func player(_ guild: SessionID, make: () -> LavalinkPlayer) -> (player: LavalinkPlayer, made: Bool) {
        state.withLock { state in
            if let player = state.players[guild] { return (player, false) }
            let player = make()
            state.players[guild] = player
            return (player, true)
        }
    }

    func removePlayer(_ guild: SessionID) -> LavalinkPlayer? {
        state.withLock { $0.players.removeValue(forKey: guild) }
    }

    /// Every player, taken out: the session ends.
    func removeAllPlayers() -> [LavalinkPlayer] {
        state.withLock { state in
            defer { state.players.removeAll() }
            return Array(state.players.values)
        }
    }
}
