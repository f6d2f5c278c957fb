// The voice gateway's handshake and upkeep (version 8), as a value: it takes what happened (the
// socket opened, a message arrived, a heartbeat fell due, the socket closed) and returns what to
// do; the connection that owns the WebSocket and the UDP socket carries the actions out.
//
// Identify (op 0) → Hello (op 8, the heartbeat interval) and Ready (op 2: SSRC, the UDP address,
// the modes) → IP discovery over UDP → Select Protocol (op 1) → Session Description (op 4: the
// mode, the secret key, the DAVE protocol version) → connected. Heartbeats (op 3) carry `seq_ack`,
// the last sequence number the server put on a message; an unanswered heartbeat when the next is
// due means the socket is dead (closed, then resumed). A resume (op 7) after a dropped socket
// ends at Resumed (op 9) with the session as it was: the same SSRC, mode and key (Discord's
// documentation; no new Session Description comes).
import Foundation

/// What the bot hands over from its main gateway: VOICE_STATE_UPDATE (user, session, channel)
/// and VOICE_SERVER_UPDATE (token, endpoint) for one guild.
public struct VoiceCredentials: Equatable, Sendable {
    public var guildID: String
    public var userID: String
    public var sessionID: String
    public var channelID: String
    public var token: String
    public var endpoint: String

    public init(guildID: String, userID: String, sessionID: String, channelID: String, token: String, endpoint: String) {
        self.guildID = guildID
        self.userID = userID
        self.sessionID = sessionID
        self.channelID = channelID
        self.token = token
        self.endpoint = endpoint
    }
}

/// What the voice server told this connection in Ready and Session Description.
public struct VoiceSession: Equatable, Sendable {
    public var ssrc: UInt32
    public var mode: TransportMode
    public var secretKey: [UInt8]
    public var daveProtocolVersion: Int

    public init(ssrc: UInt32, mode: TransportMode, secretKey: [UInt8], daveProtocolVersion: Int) {
        self.ssrc = ssrc
        self.mode = mode
        self.secretKey = secretKey
        self.daveProtocolVersion = daveProtocolVersion
    }
}

public struct VoiceGatewayMachine: Sendable {
    public enum Phase: Equatable, Sendable {
        case connecting(resuming: Bool)
        case awaitingReady
        case discovering(ssrc: UInt32, modes: [String])
        case awaitingSessionDescription(ssrc: UInt32, mode: TransportMode)
        case awaitingResumed(VoiceSession)
        case connected(VoiceSession)
        case closed
    }

    public enum Event: Equatable, Sendable {
        case opened
        case hello(heartbeatInterval: Duration)
        case ready(ssrc: UInt32, ip: String, port: Int, modes: [String])
        /// IP discovery's answer: this side's address as the voice server sees it.
        case discovered(ip: String, port: Int)
        case sessionDescription(mode: String, secretKey: [UInt8], daveProtocolVersion: Int)
        case resumed
        /// Heartbeat ACK (op 6), with the nonce it echoes (`t`) when it has one.
        case heartbeatAcknowledged(nonce: Int64?)
        /// The sequence number on a message from the server (JSON `seq`, or a binary frame's first two bytes).
        case sequence(Int)
        case heartbeatDue(nowMilliseconds: Int64)
        /// The socket closed, with the close frame's code if there was one.
        case closed(code: Int?)
        /// A message that could not be read (logged by the connection; nothing changes).
        case unreadable(String)
    }

    public enum Action: Equatable, Sendable {
        case sendIdentify(VoiceCredentials, maxDaveProtocolVersion: Int)
        case sendResume(VoiceCredentials, seqAck: Int)
        case sendSelectProtocol(ip: String, port: Int, mode: TransportMode)
        case sendHeartbeat(nonce: Int64, seqAck: Int)
        case startHeartbeats(every: Duration)
        /// The heartbeat sent at `sentAtMilliseconds` (its nonce) was answered now: the voice
        /// gateway's round trip, for the connection to measure (Lavalink's `ping`).
        case measuredRoundTrip(sentAtMilliseconds: Int64)
        case discoverIP(ip: String, port: Int, ssrc: UInt32)
        /// Audio may flow: RTP with this SSRC, sealed with this mode and key.
        case connected(VoiceSession)
        /// Close the socket if it is still open (its close is not reported back as `closed`), wait
        /// `after`, and open a new one.
        case reconnect(resume: Bool, after: Duration)
        /// The server offered no transport mode this side speaks.
        case fail(String)
        case giveUp(VoiceCloseCode)
    }

    public private(set) var phase: Phase
    public let credentials: VoiceCredentials
    public let maxDaveProtocolVersion: Int
    /// The last sequence number seen from the server (-1: none yet), sent back as `seq_ack`.
    public private(set) var seqAck = -1
    private var heartbeatUnanswered = false
    /// The nonce (send time, ms) of the heartbeat not answered yet.
    private var unansweredNonce: Int64?
    /// Sockets opened since the session was last connected: each waits longer, and after
    /// `maxAttempts` the connection gives up.
    private var attempts = 0
    public static let maxAttempts = 6
    /// The session to resume after a dropped socket, once one was established.
    private var established: VoiceSession?

    public init(credentials: VoiceCredentials, maxDaveProtocolVersion: Int) {
        self.credentials = credentials
        self.maxDaveProtocolVersion = maxDaveProtocolVersion
        self.phase = .connecting(resuming: false)
    }

    public mutating func handle(_ event: Event) -> [Action] {
        switch (event, phase) {
        case (_, .closed):
            return []
        case (.opened, .connecting(let resuming)):
            heartbeatUnanswered = false
            unansweredNonce = nil
            if resuming, let established {
                phase = .awaitingResumed(established)
                return [.sendResume(credentials, seqAck: seqAck)]
            }
            phase = .awaitingReady
            return [.sendIdentify(credentials, maxDaveProtocolVersion: maxDaveProtocolVersion)]
        case (.hello(let interval), _):
            return [.startHeartbeats(every: interval)]
        case (.ready(let ssrc, let ip, let port, let modes), .awaitingReady):
            phase = .discovering(ssrc: ssrc, modes: modes)
            return [.discoverIP(ip: ip, port: port, ssrc: ssrc)]
        case (.discovered(let ip, let port), .discovering(let ssrc, let modes)):
            guard let mode = TransportMode.choose(offered: modes) else {
                phase = .closed
                return [.fail("the voice server offers no transport mode Tonearm speaks: \(modes.joined(separator: ", "))")]
            }
            phase = .awaitingSessionDescription(ssrc: ssrc, mode: mode)
            return [.sendSelectProtocol(ip: ip, port: port, mode: mode)]
        case (.sessionDescription(let modeName, let key, let dave), .awaitingSessionDescription(let ssrc, let asked)):
            guard TransportMode(rawValue: modeName) == asked, key.count == TransportCipher.keySize else {
                phase = .closed
                return [.fail("the session description's mode \(modeName) or key of \(key.count) bytes is not what was selected")]
            }
            let session = VoiceSession(ssrc: ssrc, mode: asked, secretKey: key, daveProtocolVersion: dave)
            established = session
            attempts = 0
            phase = .connected(session)
            return [.connected(session)]
        case (.sessionDescription(let modeName, let key, let dave), .connected(var session)):
            // Sent again mid-call (a DAVE protocol change): take the new key and version.
            guard TransportMode(rawValue: modeName) == session.mode, key.count == TransportCipher.keySize else { return [] }
            session.secretKey = key
            session.daveProtocolVersion = dave
            established = session
            phase = .connected(session)
            return [.connected(session)]
        case (.resumed, .awaitingResumed(let session)):
            attempts = 0
            phase = .connected(session)
            return [.connected(session)]
        case (.heartbeatAcknowledged(let nonce), _):
            heartbeatUnanswered = false
            defer { unansweredNonce = nil }
            // Only the answer to the heartbeat sent measures the round trip: an ACK echoing
            // another nonce (or a second ACK) says nothing of it.
            guard let sent = unansweredNonce, nonce == nil || nonce == sent else { return [] }
            return [.measuredRoundTrip(sentAtMilliseconds: sent)]
        case (.sequence(let sequence), _):
            seqAck = sequence
            return []
        case (.heartbeatDue(let now), _):
            if heartbeatUnanswered {
                // No answer for a whole interval: the socket is dead even if TCP has not said so.
                return reconnect(resume: established != nil)
            }
            heartbeatUnanswered = true
            unansweredNonce = now
            return [.sendHeartbeat(nonce: now, seqAck: seqAck)]
        case (.closed(let code), _):
            switch VoiceCloseCode.decide(code, resumable: established != nil) {
            case .resume:
                return reconnect(resume: true)
            case .identifyAgain:
                established = nil
                seqAck = -1
                return reconnect(resume: false)
            case .give(up: let code):
                phase = .closed
                return [.giveUp(code)]
            }
        default:
            // A message out of order (Ready twice, a Session Description before Select Protocol):
            // nothing to do; the server's next message or its close decides.
            return []
        }
    }

    private mutating func reconnect(resume: Bool) -> [Action] {
        attempts += 1
        guard attempts <= Self.maxAttempts else {
            phase = .closed
            return [.fail("no voice session after \(Self.maxAttempts) connections in a row")]
        }
        phase = .connecting(resuming: resume)
        heartbeatUnanswered = false
        unansweredNonce = nil
        // The first try at once (a resume is best quick), then 0.5, 1, 2, 4 … seconds.
        let delay: Duration = attempts == 1 ? .zero : .milliseconds(250 << min(attempts - 1, 5))
        return [.reconnect(resume: resume, after: delay)]
    }
}
