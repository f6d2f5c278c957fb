// One guild's voice connection to a Discord voice server: the runner that carries out
// `VoiceGatewayMachine`'s actions on a real WebSocket (wss://<endpoint>/?v=8) and a real UDP
// socket, and sends the session's Opus frames as `VoiceSender` seals them.
//
// Inside `run()`: the socket's messages, read one after the other and fed to the machine, and a
// heartbeat task per socket. Audio arrives through `send(opus:)` from whoever holds the session's
// frames (the Router, on `eventLoop`) and goes straight to UDP: the frames are already paced by
// the engine. The owner calls `tick(now:)` every 20 ms for the silence frames.
//
// DAVE, when the Router has a link to tonearm-dave (`DaveSidecar`): Identify offers protocol
// version 1, and once a Session Description says DAVE the connection opens a DAVE session there,
// hands it the gateway's DAVE messages (binary ops 25, 27, 29, 30; JSON ops 21, 22, 24), sends
// what it answers (ops 26, 28 binary; 23, 31 JSON), and sends each frame as it comes back
// encrypted (none while the group is not ready). Without the link Identify offers version 0, and
// a server that requires DAVE closes with 4017, which ends the connection (reported, not retried).
import Foundation
import HummingbirdWSClient
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// What a bot hears about its guild's voice connection.
public enum VoiceConnectionState: Equatable, Sendable {
    case connecting
    /// Audio flows; with DAVE, said again with the call's privacy code once the group is ready.
    case connected(ssrc: UInt32, mode: TransportMode, privacyCode: String? = nil)
    /// The connection ended for good: Discord's close code when it closed the socket with one.
    case disconnected(code: Int?, reason: String)
}

public final class VoiceConnection: Sendable {
    public let credentials: VoiceCredentials
    private let tls: TLSConfiguration
    private let logger: Logger
    private let report: @Sendable (VoiceConnectionState) -> Void
    private let machine: Mutex<VoiceGatewayMachine>
    let media = Mutex(Media())
    /// Where IP discovery's answers go while one is awaited.
    let discoveryReplies = Mutex<AsyncStream<ByteBuffer>.Continuation?>(nil)
    /// The current socket's queue of messages, while there is a socket.
    private let outgoing = Mutex<AsyncStream<Outgoing>.Continuation?>(nil)
    /// The current socket's heartbeats.
    private let heartbeats = Mutex<Task<Void, Never>?>(nil)
    /// Set when this side decided the socket must end (a reconnect, a failure).
    private let control = Mutex<Control?>(nil)

    struct Media: Sendable {
        var sender: VoiceSender?
        var channel: (any Channel)?
        var remote: SocketAddress?
    }

    private enum Control: Sendable {
        case reconnect(after: Duration)
        case stop(VoiceConnectionState)
    }

    private enum Outgoing: Sendable {
        case text(String)
        case binary([UInt8])
        /// End the socket (after `control` says what comes next).
        case close
    }

    /// DAVE's process and this connection's id there, when the Router has one.
    private let dave: (sidecar: DaveSidecar, id: UInt32)?
    /// What the frames need (`DaveNeed`'s raw value): nothing, the DAVE session first, or
    /// nothing can be sent (the call needs DAVE and its session is gone).
    private let daveNeed = Atomic<UInt8>(DaveNeed.none.rawValue)
    private let roundTrip = Atomic<Int>(-1)

    private enum DaveNeed: UInt8 {
        case none, session, unavailable
    }

    /// The loop of the UDP socket: frames handed over on it are written without a hop.
    public let eventLoop: any EventLoop

    /// `tls` checks the voice server's certificate (the system's roots unless a test gives its own).
    public init(
        credentials: VoiceCredentials, tls: TLSConfiguration = .makeClientConfiguration(),
        eventLoop: any EventLoop = MultiThreadedEventLoopGroup.singleton.next(), dave sidecar: DaveSidecar? = nil,
        logger: Logger, report: @escaping @Sendable (VoiceConnectionState) -> Void
    ) {
        self.eventLoop = eventLoop
        self.credentials = credentials
        // A socket the voice server closed is done with: waiting up to NIOSSL's 5 s for its TLS
        // close_notify held a resume after a 4015 back by exactly 5 s (1 run in about 10 against
        // the stand-in, 2026-11-27).
        var tls = tls
        tls.shutdownTimeout = .milliseconds(200)
        self.tls = tls
        self.logger = logger
        self.report = report
        self.machine = Mutex(VoiceGatewayMachine(credentials: credentials, maxDaveProtocolVersion: sidecar?.maxProtocolVersion ?? 0))
        // The sidecar's handler holds the connection weakly: the sidecar outlives it.
        let box = WeakConnection()
        self.dave = sidecar.map { sidecar in (sidecar, sidecar.attach { [box] message in box.connection?.heard(message) }) }
        box.connection = self
    }

    private final class WeakConnection: @unchecked Sendable {
        // @unchecked: set once in init, before the sidecar can call it; read only after.
        weak var connection: VoiceConnection?
    }

    /// The address the voice gateway answers at: Discord hands `host:port` (or a bare host).
    public var url: String { "wss://\(credentials.endpoint)/?v=8" }

    /// Packets this connection put on UDP (audio and silence), for `/sessions` and tests.
    public var packetsSent: UInt64 { media.withLock { $0.sender?.packetsSent ?? 0 } }
    /// The voice gateway's last heartbeat round trip, in ms (-1 until one was answered).
    public var pingMS: Int { roundTrip.load(ordering: .relaxed) }

    /// One 20 ms Opus frame of the session: sent at once while connected, dropped otherwise.
    public func send(opus frame: ByteBuffer) {
        send(opus: Array(frame.readableBytesView))
    }

    public func send(opus: [UInt8]) {
        switch DaveNeed(rawValue: daveNeed.load(ordering: .relaxed)) {
        case .session:
            guard let dave else { return }
            dave.sidecar.encrypt(dave.id, frame: opus) { [weak self] sealed in
                if let sealed { self?.sendNow(opus: sealed) }
            }
        case .unavailable:
            return  // a call that needs DAVE hears no plain frame
        default:
            sendNow(opus: opus)
        }
    }

    private func sendNow(opus: [UInt8]) {
        let now = ContinuousClock.now
        let (output, ssrc, channel, remote) = media.withLock { media -> (VoiceSender.Output, UInt32, (any Channel)?, SocketAddress?) in
            // Optional chaining mutates the sender in place (a copy costs its arrays' retains).
            guard let output = media.sender?.frame(opus, now: now), let ssrc = media.sender?.session.ssrc else {
                return (.init(), 0, nil, nil)
            }
            return (output, ssrc, media.channel, media.remote)
        }
        carryOut(output, ssrc: ssrc, channel: channel, remote: remote)
    }

    /// Runs the connection until Discord ends it, it gives up, or the task is cancelled (the bot
    /// left the channel, new credentials replaced these, the Router stops). The owner
    /// calls `tick(now:)` every 20 ms meanwhile (one clock for all of a Router's connections).
    public func run() async {
        report(.connecting)
        let final = await connectUntilDone() ?? .disconnected(code: nil, reason: "the voice connection was closed")
        let channel = media.withLock { media -> (any Channel)? in
            defer { media = Media() }
            return media.channel
        }
        try? await channel?.close()
        if let dave { dave.sidecar.detach(dave.id) }
        report(final)
    }

    /// What DAVE's process says to this connection.
    private func heard(_ message: DaveSidecar.Message) {
        switch message {
        case .sendBinary(let bytes):
            _ = outgoing.withLock { $0?.yield(.binary(bytes)) }
        case .sendText(let text):
            say(text)
        case .state(let ready, let code):
            logger.info("DAVE", metadata: ["guild": "\(credentials.guildID)", "ready": "\(ready)", "privacy_code": "\(code ?? "-")"])
            if ready, let code, let session = media.withLock({ $0.sender?.session }) {
                report(.connected(ssrc: session.ssrc, mode: session.mode, privacyCode: code))
            }
        case .lost:
            // The DAVE session is gone: the call cannot be heard until a new one is made, which
            // takes a new Identify; the connection ends and says why.
            daveNeed.store(DaveNeed.unavailable.rawValue, ordering: .relaxed)
            control.withLock { $0 = .stop(.disconnected(code: nil, reason: "DAVE's process beside the Router went away")) }
            _ = outgoing.withLock { $0?.yield(.close) }
        }
    }

    /// The silence frames once the audio has stopped: called every 20 ms by the owner.
    public func tick(now: ContinuousClock.Instant = .now) {
        let (output, ssrc, channel, remote) = media.withLock { media -> (VoiceSender.Output, UInt32, (any Channel)?, SocketAddress?) in
            guard media.sender?.speaking == true, let output = media.sender?.tick(now: now), !output.packets.isEmpty,
                let ssrc = media.sender?.session.ssrc
            else { return (.init(), 0, nil, nil) }
            return (output, ssrc, media.channel, media.remote)
        }
        guard !output.packets.isEmpty else { return }
        carryOut(output, ssrc: ssrc, channel: channel, remote: remote)
    }

    private func carryOut(_ output: VoiceSender.Output, ssrc: UInt32, channel: (any Channel)?, remote: SocketAddress?) {
        if output.speaking == true { say(VoiceGatewayMessages.speaking(true, ssrc: ssrc)) }
        if let channel, let remote {
            for packet in output.packets {
                channel.write(AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: packet)), promise: nil)
            }
            if !output.packets.isEmpty { channel.flush() }
        }
        if output.speaking == false { say(VoiceGatewayMessages.speaking(false, ssrc: ssrc)) }
    }

    private func say(_ text: String) {
        _ = outgoing.withLock { $0?.yield(.text(text)) }
    }

    /// Sockets, one after the other, until the machine gives up or the task is cancelled.
    private func connectUntilDone() async -> VoiceConnectionState? {
        while !Task.isCancelled {
            // DAVE lost between two sockets: a resume would bring the call back without it.
            if daveNeed.load(ordering: .relaxed) == DaveNeed.unavailable.rawValue {
                return .disconnected(code: nil, reason: "DAVE's process beside the Router went away")
            }
            control.withLock { $0 = nil }
            var closeCode: Int?
            var dropped = true
            do {
                let close = try await WebSocketClient.connect(
                    url: url, configuration: WebSocketClientConfiguration(maxFrameSize: 1 << 20, closeTimeout: .seconds(1)),
                    tlsConfiguration: tls, logger: logger
                ) { inbound, outbound, _ in
                    try await self.converse(inbound: inbound, outbound: outbound)
                }
                if let close { closeCode = Int(UInt16(webSocketErrorCode: close.closeCode)); dropped = false }
            } catch {
                logger.debug("voice gateway socket failed", metadata: ["guild": "\(credentials.guildID)", "error": "\(error)"])
            }
            outgoing.withLock { $0?.finish(); $0 = nil }
            if Task.isCancelled { return nil }
            let decided = control.withLock { $0 }
            let next: Control
            if let decided {
                next = decided
            } else {
                logger.info("voice gateway closed", metadata: ["guild": "\(credentials.guildID)", "code": "\(closeCode.map(String.init) ?? "none")"])
                let actions = machine.withLock { $0.handle(.closed(code: dropped ? nil : closeCode)) }
                next = Self.control(from: actions, closeCode: closeCode) ?? .stop(.disconnected(code: closeCode, reason: "the voice gateway closed"))
            }
            switch next {
            case .stop(let state):
                return state
            case .reconnect(let delay):
                report(.connecting)
                try? await Task.sleep(for: delay)
            }
        }
        return nil
    }

    private static func control(from actions: [VoiceGatewayMachine.Action], closeCode: Int?) -> Control? {
        for action in actions {
            switch action {
            case .reconnect(_, let after): return .reconnect(after: after)
            case .giveUp(let code): return .stop(.disconnected(code: code.rawValue, reason: code.description))
            case .fail(let reason): return .stop(.disconnected(code: closeCode, reason: reason))
            default: continue
            }
        }
        return nil
    }

    /// One socket: its writer, its heartbeats, and its messages fed to the machine.
    private func converse(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let (messages, continuation) = AsyncStream<Outgoing>.makeStream()
        outgoing.withLock { $0 = continuation }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await message in messages {
                    switch message {
                    case .text(let text): try await outbound.write(.text(text))
                    case .binary(let bytes): try await outbound.write(.binary(ByteBuffer(bytes: bytes)))
                    case .close: try? await outbound.close(.unknown(4900), reason: "DAVE lost")
                    }
                }
            }
            defer { heartbeats.withLock { $0?.cancel(); $0 = nil } }
            try await perform(machine.withLock { $0.handle(.opened) }, outbound: outbound)
            for try await message in inbound.messages(maxSize: 1 << 20) {
                let events: [VoiceGatewayMachine.Event]
                switch message {
                case .text(let text):
                    events = VoiceGatewayMessages.events(fromText: text)
                    if let dave, VoiceGatewayMessages.isDave(text: text) { dave.sidecar.forward(dave.id, text: text) }
                case .binary(let bytes):
                    events = VoiceGatewayMessages.sequence(ofBinary: bytes.readableBytesView).map { [.sequence($0)] } ?? []
                    if let dave { dave.sidecar.forward(dave.id, binary: Array(bytes.readableBytesView)) }
                }
                for event in events {
                    if case .unreadable(let why) = event {
                        logger.warning("unreadable voice gateway message", metadata: ["guild": "\(credentials.guildID)", "why": "\(why)"])
                    }
                    try await perform(machine.withLock { $0.handle(event) }, outbound: outbound)
                }
                if control.withLock({ $0 }) != nil { break }
            }
            continuation.finish()
            group.cancelAll()
        }
    }

    private func perform(
        _ actions: [VoiceGatewayMachine.Action], outbound: WebSocketOutboundWriter
    ) async throws {
        for action in actions {
            if let text = VoiceGatewayMessages.text(for: action) {
                say(text)
                continue
            }
            switch action {
            case .startHeartbeats(let interval):
                let task = Task { await self.heartbeat(every: interval, outbound: outbound) }
                heartbeats.withLock { $0?.cancel(); $0 = task }
            case .discoverIP(let ip, let port, let ssrc):
                let actions: [VoiceGatewayMachine.Action]
                do {
                    let (address, localPort) = try await discover(ip: ip, port: port, ssrc: ssrc)
                    actions = machine.withLock { $0.handle(.discovered(ip: address, port: localPort)) }
                } catch {
                    actions = [.fail("IP discovery with \(ip):\(port) failed: \(error)")]
                }
                try await perform(actions, outbound: outbound)
            case .connected(let session):
                let kept = media.withLock { $0.sender?.session == session }
                if let dave, !kept {
                    // A new session: DAVE's session is made again for it (or dropped).
                    let wanted = session.daveProtocolVersion > 0
                    let opened = wanted && dave.sidecar.open(
                        dave.id, userID: credentials.userID, channelID: credentials.channelID, protocolVersion: session.daveProtocolVersion)
                    let need: DaveNeed = !wanted ? .none : opened ? .session : .unavailable
                    daveNeed.store(need.rawValue, ordering: .relaxed)
                    if wanted && !opened {
                        // Nobody in a DAVE call could hear plain frames: end, and say why.
                        logger.warning("DAVE asked for, but tonearm-dave is not reachable", metadata: ["guild": "\(credentials.guildID)"])
                        control.withLock { $0 = .stop(.disconnected(code: nil, reason: "the call needs DAVE, and tonearm-dave is not reachable")) }
                        try? await outbound.close(.normalClosure, reason: nil)
                        continue
                    }
                }
                // The sender last: a frame that finds it finds what DAVE needs already decided
                // (made first, a frame could slip out plain into a call that needs DAVE).
                if !kept { media.withLock { $0.sender = try? VoiceSender(session: session) } }
                logger.info("voice connected", metadata: ["guild": "\(credentials.guildID)", "ssrc": "\(session.ssrc)", "mode": "\(session.mode.rawValue)", "resumed": "\(kept)", "dave": "\(session.daveProtocolVersion)"])
                report(.connected(ssrc: session.ssrc, mode: session.mode))
            case .reconnect(_, let after):
                control.withLock { $0 = .reconnect(after: after) }
                try? await outbound.close(.unknown(4900), reason: "reconnecting")
            case .fail(let reason):
                control.withLock { $0 = .stop(.disconnected(code: nil, reason: reason)) }
                try? await outbound.close(.normalClosure, reason: nil)
            case .giveUp(let code):
                control.withLock { $0 = .stop(.disconnected(code: code.rawValue, reason: code.description)) }
            case .measuredRoundTrip(let sent):
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                roundTrip.store(Int(min(max(now - sent, 0), 60_000)), ordering: .relaxed)
            default:
                continue
            }
        }
    }

    private func heartbeat(every interval: Duration, outbound: WebSocketOutboundWriter) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: interval)
            if Task.isCancelled { return }
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            let actions = machine.withLock { $0.handle(.heartbeatDue(nowMilliseconds: now)) }
            for action in actions {
                if let text = VoiceGatewayMessages.text(for: action) { say(text) }
                if case .reconnect(_, let after) = action {
                    logger.info("voice gateway stopped answering heartbeats", metadata: ["guild": "\(credentials.guildID)"])
                    control.withLock { $0 = .reconnect(after: after) }
                    try? await outbound.close(.unknown(4900), reason: "no heartbeat acknowledged")
                    return
                }
            }
        }
    }
}
