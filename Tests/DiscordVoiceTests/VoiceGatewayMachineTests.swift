// The voice gateway's handshake, heartbeats, resumes and close codes, decided without a socket.
import Testing

@testable import DiscordVoice

struct VoiceGatewayMachineTests {
    static let credentials = VoiceCredentials(
        guildID: "41771983423143937", userID: "104694319306248192", sessionID: "my_session_id",
        channelID: "127121515262115840", token: "my_token", endpoint: "voice.example:443")
    static let key = [UInt8](repeating: 7, count: 32)
    static let both = ["aead_aes256_gcm_rtpsize", "aead_xchacha20_poly1305_rtpsize"]

    /// A machine taken through the handshake to `connected`.
    static func connected(modes: [String] = both) -> (VoiceGatewayMachine, VoiceSession) {
        var machine = VoiceGatewayMachine(credentials: credentials, maxDaveProtocolVersion: 1)
        _ = machine.handle(.opened)
        _ = machine.handle(.hello(heartbeatInterval: .milliseconds(13_750)))
        _ = machine.handle(.ready(ssrc: 1, ip: "127.0.0.1", port: 1234, modes: modes))
        _ = machine.handle(.discovered(ip: "192.0.2.7", port: 40_000))
        let mode = TransportMode.choose(offered: modes) ?? .aes256GCM
        let actions = machine.handle(.sessionDescription(mode: mode.rawValue, secretKey: key, daveProtocolVersion: 1))
        let session = VoiceSession(ssrc: 1, mode: mode, secretKey: key, daveProtocolVersion: 1)
        #expect(actions == [.connected(session)])
        return (machine, session)
    }

    @Test func theHandshakeGoesIdentifyReadyDiscoverySelectDescription() {
        var machine = VoiceGatewayMachine(credentials: Self.credentials, maxDaveProtocolVersion: 1)
        #expect(machine.handle(.opened) == [.sendIdentify(Self.credentials, maxDaveProtocolVersion: 1)])
        #expect(machine.handle(.hello(heartbeatInterval: .milliseconds(13_750))) == [.startHeartbeats(every: .milliseconds(13_750))])
        #expect(machine.handle(.ready(ssrc: 1, ip: "127.0.0.1", port: 1234, modes: Self.both)) == [.discoverIP(ip: "127.0.0.1", port: 1234, ssrc: 1)])
        #expect(machine.handle(.discovered(ip: "192.0.2.7", port: 40_000)) == [.sendSelectProtocol(ip: "192.0.2.7", port: 40_000, mode: .aes256GCM)])
        #expect(machine.handle(.sessionDescription(mode: "aead_aes256_gcm_rtpsize", secretKey: Self.key, daveProtocolVersion: 1))
            == [.connected(VoiceSession(ssrc: 1, mode: .aes256GCM, secretKey: Self.key, daveProtocolVersion: 1))])
    }

    @Test func xChaChaIsSelectedWhenAESIsNotOfferedAndNothingElseIsAccepted() {
        #expect(Self.connected(modes: ["aead_xchacha20_poly1305_rtpsize", "xsalsa20_poly1305"]).1.mode == .xchacha20Poly1305)
        var machine = VoiceGatewayMachine(credentials: Self.credentials, maxDaveProtocolVersion: 1)
        _ = machine.handle(.opened)
        _ = machine.handle(.ready(ssrc: 1, ip: "127.0.0.1", port: 1234, modes: ["xsalsa20_poly1305_lite"]))
        let actions = machine.handle(.discovered(ip: "192.0.2.7", port: 40_000))
        guard case .fail = actions.first else { Issue.record("\(actions)"); return }
        #expect(machine.phase == .closed)
    }

    @Test func aSessionDescriptionWithAnotherModeOrAShortKeyIsRefused() {
        for (mode, key) in [("aead_xchacha20_poly1305_rtpsize", Self.key), ("aead_aes256_gcm_rtpsize", [UInt8](repeating: 1, count: 16))] {
            var machine = VoiceGatewayMachine(credentials: Self.credentials, maxDaveProtocolVersion: 1)
            _ = machine.handle(.opened)
            _ = machine.handle(.ready(ssrc: 1, ip: "127.0.0.1", port: 1234, modes: Self.both))
            _ = machine.handle(.discovered(ip: "192.0.2.7", port: 40_000))
            let actions = machine.handle(.sessionDescription(mode: mode, secretKey: key, daveProtocolVersion: 1))
            guard case .fail = actions.first else { Issue.record("\(mode), \(key.count) bytes: \(actions)"); continue }
        }
    }

    @Test func heartbeatsAcknowledgeTheLastSequenceAndAnUnansweredOneReconnects() {
        var (machine, _) = Self.connected()
        _ = machine.handle(.sequence(41))
        #expect(machine.handle(.heartbeatDue(nowMilliseconds: 1000)) == [.sendHeartbeat(nonce: 1000, seqAck: 41)])
        #expect(machine.handle(.heartbeatAcknowledged(nonce: 1000)) == [.measuredRoundTrip(sentAtMilliseconds: 1000)])
        _ = machine.handle(.sequence(42))
        #expect(machine.handle(.heartbeatDue(nowMilliseconds: 2000)) == [.sendHeartbeat(nonce: 2000, seqAck: 42)])
        #expect(machine.handle(.heartbeatDue(nowMilliseconds: 3000)) == [.reconnect(resume: true, after: .zero)])
    }

    /// The round trip is measured from the heartbeat's answer only: an ACK echoing another nonce,
    /// or a second ACK, measures nothing.
    @Test func onlyTheAnswerToTheHeartbeatSentMeasuresTheRoundTrip() {
        var (machine, _) = Self.connected()
        #expect(machine.handle(.heartbeatAcknowledged(nonce: 5)).isEmpty, "nothing was sent")
        _ = machine.handle(.heartbeatDue(nowMilliseconds: 7_000))
        #expect(machine.handle(.heartbeatAcknowledged(nonce: 6_999)).isEmpty, "another nonce")
        _ = machine.handle(.heartbeatDue(nowMilliseconds: 8_000))
        #expect(machine.handle(.heartbeatAcknowledged(nonce: nil)) == [.measuredRoundTrip(sentAtMilliseconds: 8_000)])
        #expect(machine.handle(.heartbeatAcknowledged(nonce: 8_000)).isEmpty, "answered already")
    }

    /// Discord documents a resume as op 7 answered by op 9, the session going on as it was.
    @Test func aResumeSendsTheSessionAndSeqAckAndResumedReconnectsWithTheSameKey() {
        var (machine, session) = Self.connected()
        _ = machine.handle(.sequence(10))
        #expect(machine.handle(.closed(code: 4015)) == [.reconnect(resume: true, after: .zero)])
        #expect(machine.handle(.opened) == [.sendResume(Self.credentials, seqAck: 10)])
        _ = machine.handle(.hello(heartbeatInterval: .seconds(5)))
        #expect(machine.handle(.resumed) == [.connected(session)])
    }

    @Test(arguments: [
        (nil, VoiceCloseDecision.resume), (1006, .resume), (4015, .resume), (4009, .identifyAgain),
        (4006, .identifyAgain), (4014, .give(up: .disconnected)), (4017, .give(up: .daveRequired)),
        (4016, .give(up: .unknownEncryptionMode)), (4021, .give(up: .rateLimited)), (4022, .give(up: .callTerminated)),
        (4004, .give(up: .authenticationFailed)),
    ] as [(Int?, VoiceCloseDecision)])
    func eachCloseCodeHasItsDecision(code: Int?, decision: VoiceCloseDecision) {
        #expect(VoiceCloseCode.decide(code, resumable: true) == decision)
    }

    @Test func beforeASessionExistsADroppedSocketIdentifiesAgain() {
        var machine = VoiceGatewayMachine(credentials: Self.credentials, maxDaveProtocolVersion: 1)
        _ = machine.handle(.opened)
        #expect(machine.handle(.closed(code: 4015)) == [.reconnect(resume: false, after: .zero)])
        #expect(machine.handle(.opened) == [.sendIdentify(Self.credentials, maxDaveProtocolVersion: 1)])
    }

    @Test func aGivenUpConnectionReportsDiscordsCodeAndDoesNothingMore() {
        var (machine, _) = Self.connected()
        #expect(machine.handle(.closed(code: 4014)) == [.giveUp(.disconnected)])
        #expect(machine.phase == .closed)
        #expect(machine.handle(.opened).isEmpty && machine.handle(.heartbeatDue(nowMilliseconds: 1)).isEmpty)
    }

    @Test func reconnectsWaitLongerEachTimeAndEndAfterTheLimit() {
        var machine = VoiceGatewayMachine(credentials: Self.credentials, maxDaveProtocolVersion: 1)
        var delays: [Duration] = []
        for _ in 0..<VoiceGatewayMachine.maxAttempts {
            _ = machine.handle(.opened)
            guard case .reconnect(_, let after) = machine.handle(.closed(code: nil)).first else { Issue.record("no reconnect"); return }
            delays.append(after)
        }
        #expect(delays == [.zero, .milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8)])
        _ = machine.handle(.opened)
        guard case .fail = machine.handle(.closed(code: nil)).first else { Issue.record("no end"); return }
        #expect(machine.phase == .closed)
    }

    @Test func aConnectedSessionStartsItsCountOfTriesAgain() {
        var (machine, _) = Self.connected()
        for _ in 0..<3 {
            _ = machine.handle(.closed(code: nil))
            _ = machine.handle(.opened)
            _ = machine.handle(.resumed)
        }
        #expect(machine.handle(.closed(code: nil)) == [.reconnect(resume: true, after: .zero)])
    }
}
