// The Discord voice connections this Router makes for its sessions (the `voice` command on
// `/bot`): at most one per session, each fed the session's frames by a subscription of kind
// `voice`, so it keeps the session alive as any client does and hears exactly what the session's
// other clients hear. Its state goes to the session's clients as `voice_state` events.
//
// A connection lives until `voice_leave`, a newer `voice` for the same session (Discord moved the
// call: new credentials), Discord ending it (a close code it gives up on), or the Router
// stopping. It does not end with the bot's WebSocket: a bot that reconnects keeps its voice.
import DiscordVoice
import Logging
import ServiceLifecycle
import NIOCore
import NIOSSL
import ServiceSupport
import Synchronization
import WireProtocol

final class VoiceConnections: Sendable {
    private let store: SessionStore
    private let tls: TLSConfiguration
    private let logger: Logger
    private let running = Mutex<[SessionID: Entry]>([:])
    private let generations = Atomic<UInt64>(0)

    private struct Entry: Sendable {
        let generation: UInt64
        let connection: VoiceConnection
        let task: Task<Void, Never>
        var state: VoiceConnectionState
    }

    /// `trustRoots`: a PEM file of the certificate authorities voice servers are checked against
    /// (the system's when nil; tests name their stand-in's).
    init(store: SessionStore, trustRoots: String?, logger: Logger) {
        self.store = store
        var tls = TLSConfiguration.makeClientConfiguration()
        if let trustRoots { tls.trustRoots = .file(trustRoots) }
        self.tls = tls
        self.logger = logger
    }

    /// Connects `id`'s audio to the voice server `credentials` name, ending the connection it had.
    func connect(_ id: SessionID, credentials: VoiceCredentials) {
        let generation = generations.add(1, ordering: .relaxed).newValue
        let connection = VoiceConnection(credentials: credentials, tls: tls, logger: logger) { [weak self] state in
            self?.changed(id, generation: generation, to: state)
        }
        let task = Task { [store] in
            let subscription = store.subscribe(id, kind: .voice)
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await message in subscription.messages {
                        if case .audio(let frame) = message { connection.send(opus: Array(frame.readableBytesView)) }
                    }
                }
                group.addTask { await connection.run() }
                await group.next()
                group.cancelAll()
            }
            store.unsubscribe(id, token: subscription.token)
        }
        let replaced = running.withLock { running in
            defer { running[id] = Entry(generation: generation, connection: connection, task: task, state: .connecting) }
            return running[id]
        }
        replaced?.task.cancel()
    }

    /// Ends `id`'s voice connection; false when it had none.
    func leave(_ id: SessionID) -> Bool {
        guard let entry = running.withLock({ $0.removeValue(forKey: id) }) else { return false }
        entry.task.cancel()
        store.broadcast(id, VoiceStateEvent(sessionID: id.description, .disconnected(code: nil, reason: "voice_leave")).json())
        return true
    }

    /// The state of `id`'s voice connection, nil when it has none.
    func state(of id: SessionID) -> VoiceConnectionState? {
        running.withLock { $0[id]?.state }
    }

    /// Closes every connection (the Router is stopping) and waits for them to end.
    func stopAll() async {
        let entries = running.withLock { running in
            defer { running.removeAll() }
            return Array(running.values)
        }
        for entry in entries { entry.task.cancel() }
        for entry in entries { await entry.task.value }
    }

    private func changed(_ id: SessionID, generation: UInt64, to state: VoiceConnectionState) {
        let current = running.withLock { running -> Bool in
            guard running[id]?.generation == generation else { return false }
            if case .disconnected = state {
                running[id] = nil
            } else {
                running[id]?.state = state
            }
            return true
        }
        // A replaced connection's last words are not news: its successor reports for the session.
        guard current else { return }
        store.broadcast(id, VoiceStateEvent(sessionID: id.description, state).json())
    }
}

/// Closes every voice connection when the Router is asked to stop.
struct VoiceShutdown: Service {
    let voice: VoiceConnections

    func run() async throws {
        try? await gracefulShutdown()
        await voice.stopAll()
    }
}
