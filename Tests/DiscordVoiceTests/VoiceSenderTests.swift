// What a connected voice session puts on UDP, and the voice gateway's messages both ways:
// decided without sockets.
import Crypto
import Foundation
import NIOCore
import Testing

@testable import DiscordVoice

struct VoiceSenderTests {
    static let session = VoiceSession(ssrc: 7, mode: .aes256GCM, secretKey: [UInt8](repeating: 1, count: 32), daveProtocolVersion: 0)

    /// The RTP sequence and timestamp of a sealed packet.
    static func header(_ packet: [UInt8]) -> (sequence: UInt16, timestamp: UInt32) {
        (UInt16(packet[2]) << 8 | UInt16(packet[3]), packet[4..<8].reduce(0) { $0 << 8 | UInt32($1) })
    }

    @Test func speakingComesFirstThenFramesThenFiveSilenceFramesThenSpeakingOff() throws {
        var sender = try VoiceSender(session: Self.session, stream: RTPStream(ssrc: 7, sequence: 100, timestamp: 0))
        let start = ContinuousClock.now
        let first = sender.frame([1, 2, 3], now: start)
        #expect(first.speaking == true && first.packets.count == 1)
        #expect(sender.frame([1, 2, 3], now: start + .milliseconds(20)).speaking == nil)
        // Within the quiet threshold: nothing.
        #expect(sender.tick(now: start + .milliseconds(100)) == .init())
        var silence: [VoiceSender.Output] = []
        for tick in 0..<8 { silence.append(sender.tick(now: start + .milliseconds(120 + 20 * tick))) }
        #expect(silence.prefix(5).allSatisfy { $0.packets.count == 1 })
        #expect(silence[0..<4].allSatisfy { $0.speaking == nil } && silence[4].speaking == false)
        #expect(silence[5...].allSatisfy { $0 == .init() }, "nothing after the five silence frames")
        #expect(sender.packetsSent == 7 && !sender.speaking)
        // Each packet opens to its payload: the silence frames are F8 FF FE.
        let packet = silence[0].packets[0]
        let box = try AES.GCM.SealedBox(
            nonce: AES.GCM.Nonce(data: packet.suffix(4) + [UInt8](repeating: 0, count: 8)),
            ciphertext: packet[12..<(packet.count - 20)], tag: packet[(packet.count - 20)..<(packet.count - 4)])
        let opened = try AES.GCM.open(box, using: SymmetricKey(data: Self.session.secretKey), authenticating: packet.prefix(12))
        #expect(Array(opened) == VoiceSender.silenceFrame)
    }

    @Test func audioAfterAPauseMovesTheTimestampOnButNotTheSequence() throws {
        var sender = try VoiceSender(session: Self.session, stream: RTPStream(ssrc: 7, sequence: 100, timestamp: 0))
        let start = ContinuousClock.now
        _ = sender.frame([1], now: start)
        for tick in 0..<5 { _ = sender.tick(now: start + .milliseconds(120 + 20 * tick)) }
        // The last silence frame went at 200 ms; audio comes back 2 s after it.
        let back = sender.frame([1], now: start + .milliseconds(2_200))
        #expect(back.speaking == true)
        let header = Self.header(back.packets[0])
        #expect(header.sequence == 106, "one sequence number per packet sent")
        #expect(header.timestamp == 960 * 6 + 960 * 99, "the 99 frames not sent in 2 s are in the timestamp")
    }

    @Test func aLateFrameAmidTheSilenceGoesOnWithoutSpeakingAgain() throws {
        var sender = try VoiceSender(session: Self.session)
        let start = ContinuousClock.now
        _ = sender.frame([1], now: start)
        _ = sender.tick(now: start + .milliseconds(120))
        let late = sender.frame([1], now: start + .milliseconds(130))
        #expect(late.speaking == nil && late.packets.count == 1)
        #expect(sender.tick(now: start + .milliseconds(140)) == .init(), "the silence starts over after the late frame")
    }
}

struct VoiceGatewayMessagesTests {
    static func object(_ text: String?) -> [String: Any] {
        text.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] } ?? [:]
    }

    @Test func identifySelectHeartbeatResumeAndSpeakingHaveDiscordsShapes() {
        let credentials = VoiceGatewayMachineTests.credentials
        let identify = Self.object(VoiceGatewayMessages.text(for: .sendIdentify(credentials, maxDaveProtocolVersion: 0)))
        #expect(identify["op"] as? Int == 0)
        #expect((identify["d"] as? [String: Any])?.keys.sorted() == ["max_dave_protocol_version", "server_id", "session_id", "token", "user_id"])
        #expect((identify["d"] as? [String: Any])?["server_id"] as? String == credentials.guildID)
        let select = Self.object(VoiceGatewayMessages.text(for: .sendSelectProtocol(ip: "192.0.2.1", port: 5000, mode: .xchacha20Poly1305)))
        let data = (select["d"] as? [String: Any])?["data"] as? [String: Any]
        #expect(select["op"] as? Int == 1 && (select["d"] as? [String: Any])?["protocol"] as? String == "udp")
        #expect(data?["address"] as? String == "192.0.2.1" && data?["port"] as? Int == 5000 && data?["mode"] as? String == "aead_xchacha20_poly1305_rtpsize")
        let heartbeat = Self.object(VoiceGatewayMessages.text(for: .sendHeartbeat(nonce: 99, seqAck: 12)))
        #expect(heartbeat["op"] as? Int == 3 && (heartbeat["d"] as? [String: Any])?["seq_ack"] as? Int == 12)
        let resume = Self.object(VoiceGatewayMessages.text(for: .sendResume(credentials, seqAck: 12)))
        #expect(resume["op"] as? Int == 7 && (resume["d"] as? [String: Any])?["seq_ack"] as? Int == 12)
        let speaking = Self.object(VoiceGatewayMessages.speaking(true, ssrc: 5))
        #expect(speaking["op"] as? Int == 5 && (speaking["d"] as? [String: Any])?["speaking"] as? Int == 1)
        #expect(VoiceGatewayMessages.text(for: .startHeartbeats(every: .seconds(1))) == nil)
    }

    @Test func theServersMessagesBecomeEventsWithTheirSequenceNumbers() {
        let ready = VoiceGatewayMessages.events(fromText: #"{"op":2,"seq":1,"d":{"ssrc":5,"ip":"127.0.0.1","port":4000,"modes":["aead_aes256_gcm_rtpsize"],"heartbeat_interval":1}}"#)
        #expect(ready == [.sequence(1), .ready(ssrc: 5, ip: "127.0.0.1", port: 4000, modes: ["aead_aes256_gcm_rtpsize"])])
        let hello = VoiceGatewayMessages.events(fromText: #"{"op":8,"d":{"heartbeat_interval":13750.5}}"#)
        #expect(hello == [.hello(heartbeatInterval: .milliseconds(13_750))])
        let key = Array(0..<32).map(String.init).joined(separator: ",")
        let description = VoiceGatewayMessages.events(fromText: #"{"op":4,"seq":2,"d":{"mode":"aead_aes256_gcm_rtpsize","secret_key":[\#(key)],"dave_protocol_version":1}}"#)
        #expect(description == [.sequence(2), .sessionDescription(mode: "aead_aes256_gcm_rtpsize", secretKey: Array(0..<32), daveProtocolVersion: 1)])
        #expect(VoiceGatewayMessages.events(fromText: #"{"op":6,"seq":3,"d":{"t":1}}"#) == [.sequence(3), .heartbeatAcknowledged(nonce: 1)])
        #expect(VoiceGatewayMessages.events(fromText: #"{"op":6,"d":1501}"#) == [.heartbeatAcknowledged(nonce: 1501)], "before v8")
        #expect(VoiceGatewayMessages.events(fromText: #"{"op":6,"d":{"t":"x"}}"#) == [.heartbeatAcknowledged(nonce: nil)])
        #expect(VoiceGatewayMessages.events(fromText: #"{"op":9,"d":null}"#) == [.resumed])
        #expect(VoiceGatewayMessages.events(fromText: #"{"op":5,"seq":4,"d":{}}"#) == [.sequence(4)], "others' speaking: only its sequence")
        #expect(VoiceGatewayMessages.sequence(ofBinary: [0x01, 0x02, 25]) == 258)
        #expect(VoiceGatewayMessages.sequence(ofBinary: [0x01]) == nil)
    }

    /// Whatever the server sends, reading it never traps: a wrong type or range is unreadable.
    @Test(arguments: [
        "", "[]", "null", #"{"op":"2"}"#, #"{"op":2,"d":{"ssrc":-1,"ip":"a","port":1,"modes":[]}}"#,
        #"{"op":2,"d":{"ssrc":5,"ip":"a","port":70000,"modes":[]}}"#, #"{"op":2,"d":{"ssrc":1e300,"ip":"a","port":1,"modes":[]}}"#,
        #"{"op":4,"d":{"mode":"m","secret_key":[1,256]}}"#, #"{"op":4,"d":{"mode":"m","secret_key":[1.5]}}"#,
        #"{"op":8,"d":{"heartbeat_interval":-5}}"#, #"{"op":8,"d":{"heartbeat_interval":1e308}}"#, #"{"op":1e300}"#,
    ])
    func unreadableMessagesAreReportedNotTrappedOn(_ text: String) {
        let events = VoiceGatewayMessages.events(fromText: text)
        #expect(events.contains { if case .unreadable = $0 { true } else { false } }, "\(events)")
    }

    @Test func ipDiscoveryAsksWith74BytesAndReadsOnlyAnAnswerForItsSSRC() {
        let request = IPDiscovery.request(ssrc: 0x0102_0304)
        #expect(request.readableBytes == 74)
        #expect(Array(request.readableBytesView.prefix(8)) == [0, 1, 0, 70, 1, 2, 3, 4])
        var answer = ByteBuffer(bytes: [0, 2, 0, 70, 1, 2, 3, 4])
        answer.writeBytes(Array("203.0.113.9".utf8) + [UInt8](repeating: 0, count: 64 - 11))
        answer.writeInteger(UInt16(50_000))
        #expect(IPDiscovery.answer(answer, ssrc: 0x0102_0304)?.ip == "203.0.113.9")
        #expect(IPDiscovery.answer(answer, ssrc: 0x0102_0304)?.port == 50_000)
        #expect(IPDiscovery.answer(answer, ssrc: 9) == nil, "another SSRC's answer")
        var hostile = ByteBuffer(bytes: [0, 2, 0, 70, 1, 2, 3, 4])
        hostile.writeBytes(Array("1.2.3.4/../x".utf8) + [UInt8](repeating: 0, count: 64 - 12))
        hostile.writeInteger(UInt16(1))
        #expect(IPDiscovery.answer(hostile, ssrc: 0x0102_0304) == nil, "an address that is not one")
        #expect(IPDiscovery.answer(ByteBuffer(bytes: [0, 2]), ssrc: 0x0102_0304) == nil)
    }
}
