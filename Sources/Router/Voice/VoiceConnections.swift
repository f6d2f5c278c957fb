// The Discord voice connections this Router makes for its sessions (the `voice` command on
// `/bot`): at most one per session, each fed the session's frames by a sink of kind `voice` on
// its UDP socket's event loop (`VoiceSink`), so it keeps the session alive as any client does,
// hears exactly what the session's other clients hear, and sends each frame on the loop the
// store hands it over on. One 20 ms clock ticks every connection (the silence frames). Its state
// goes to the session's clients as `voice_state` events.
//
// A connection lives until `voice_leave`, a newer `voice` for the same session (Discord moved the
// call: new credentials), Discord ending it (a close code it gives up on), the session moving to
// another pair of a cluster, or the Router stopping. It does not end with the bot's WebSocket: a
// bot that reconnects keeps its voice.
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
    /// DAVE's process beside the pair, when configured (TONEARM_DAVE_SOCKET).
    let dave: DaveSidecar?
    private let running = Mutex<[SessionID: Entry]>([:])
    private let generations = Atomic<UInt64>(0)

    private struct Entry: Sendable {
        let generation: UInt64
        let connection: VoiceConnection
        let task: Task<Void, Never>
    }

    /// `trustRoots`: a PEM file of the certificate authorities voice servers are checked against
    /// (the system's when nil; tests name their stand-in's).
    init(store: SessionStore, trustRoots: String?, daveSocket: String? = nil, logger: Logger) {
        self.store = store
        self.dave = daveSocket.map { DaveSidecar(path: $0, logger: logger) }
        var tls = TLSConfiguration.makeClientConfiguration()
        if let trustRoots { tls.trustRoots = .file(trustRoots) }
        self.tls = tls
        self.logger = logger
    }

    /// Ticks every connection every 20 ms, until the Router stops: one wake-up for all of them.
    func tick() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: VoiceSender.frameDuration)
            let now = ContinuousClock.now
            for connection in running.withLock({ $0.values.map(\.connection) }) { connection.tick(now: now) }
        }
    }

    /// The voice gateway's heartbeat round trip of `id`'s connection, in ms (nil: none, or not
    /// measured yet).
    func ping(_ id: SessionID) -> Int? {
        guard let ping = running.withLock({ $0[id]?.connection.pingMS }), ping >= 0 else { return nil }
        return ping
    }

    /// Connects `id`'s audio to the voice server `credentials` name, ending the connection it had;
    /// the same credentials again keep the connection as it is (a bot sends them on every
    /// connection to the Router, which is how a guild that moved pairs gets its voice back).
    func connect(_ id: SessionID, credentials: VoiceCredentials) {
        guard running.withLock({ $0[id]?.connection.credentials }) != credentials else { return }
        let generation = generations.add(1, ordering: .relaxed).newValue
        let connection = VoiceConnection(credentials: credentials, tls: tls, dave: dave, logger: logger) { [weak self] state in
            self?.changed(id, generation: generation, to: state)
        }
        let task = Task { [store] in
            let sink = VoiceSink(connection: connection) { [weak self] in self?.moved(id, generation: generation) }
            let token = store.subscribe(id, kind: .voice, sink: sink)
            await connection.run()
            store.unsubscribe(id, token: token)
        }
        let replaced = running.withLock { running in
            defer { running[id] = Entry(generation: generation, connection: connection, task: task) }
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

    /// `id` moved to another pair of the cluster: its voice connection ends here at once, so that
    /// Discord never hears the guild from two pairs; the new owner makes one when the bot, moved
    /// too, sends its credentials there.
    private func moved(_ id: SessionID, generation: UInt64) {
        let entry = running.withLock { running -> Entry? in
            guard running[id]?.generation == generation else { return nil }
            return running.removeValue(forKey: id)
        }
        entry?.task.cancel()
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
            if case .disconnected = state { running[id] = nil }
            return true
        }
        // A replaced connection's last words are not news: its successor reports for the session.
        guard current else { return }
        store.broadcast(id, VoiceStateEvent(sessionID: id.description, state).json())
    }
}

/// A connection's end of the session's fan-out: each frame goes to UDP on the store's
/// delivery, on the connection's own loop; events are not its business. When the session moves
/// to another pair, the connection ends.
final class VoiceSink: ClientSink {
    let connection: VoiceConnection
    private let onMoved: @Sendable () -> Void
    var eventLoop: any EventLoop { connection.eventLoop }

    init(connection: VoiceConnection, onMoved: @escaping @Sendable () -> Void) {
        self.connection = connection
        self.onMoved = onMoved
    }

    func moved() { onMoved() }

    func encode(_ message: ClientMessage) -> ByteBuffer {
        if case .audio(let frame) = message { return frame }
        return ByteBuffer()
    }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        if audio { connection.send(opus: bytes) }
    }
}

/// Ticks the voice connections while the Router runs, and closes them when it is asked to stop.
struct VoiceService: Service {
    let voice: VoiceConnections

    func run() async throws {
        let clock = Task { await voice.tick() }
        let dave = Task { [sidecar = voice.dave] in await sidecar?.run() }
        try? await gracefulShutdown()
        clock.cancel()
        dave.cancel()
        await voice.stopAll()
    }
}
