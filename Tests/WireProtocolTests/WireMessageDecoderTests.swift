import NIOCore
import NIOTestUtils
import ServiceSupport
import Testing
import WireProtocol

@Suite struct WireMessageDecoderTests {
    /// A deterministic mixed stream: packets of varied sizes and ids, events with hostile text.
    static func stream(count: Int) throws -> (ByteBuffer, [WireMessage]) {
        var generator = SplitMix64(seed: 0x5EED)
        var buffer = ByteBuffer()
        var messages: [WireMessage] = []
        let ids = try ["1234567890123456789", "a", "guild-7", String(repeating: "z", count: 24)].map { try SessionID($0) }
        for i in 0..<count {
            let id = ids[Int(generator.next() % UInt64(ids.count))]
            if generator.next() % 4 == 0 {
                let event = WireEvent(
                    type: i % 2 == 0 ? .ready : .finished, sessionID: id, playID: UInt64(i), reason: .finished,
                    message: "line \(i) with \"quotes\", {braces}\nand a newline")
                buffer.writeEvent(event)
                messages.append(.event(event))
            } else {
                let size = 1 + Int(generator.next() % 400)
                let payload = ByteBuffer(bytes: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) })
                let packet = AudioPacket(sessionID: id, payload: payload)
                try buffer.writeAudioPacket(packet)
                messages.append(.audio(packet))
            }
        }
        return (buffer, messages)
    }

    /// NIO's verifier tries its own splits (one byte at a time, all at once, and more); it is
    /// quadratic, so it gets a shorter stream than the 1,000-message chunking test below.
    @Test func verifierAcceptsEverySplitOfAMixedStream() throws {
        let (buffer, messages) = try Self.stream(count: 120)
        try ByteToMessageDecoderVerifier.verifyDecoder(
            inputOutputPairs: [(buffer, messages)], decoderFactory: { WireMessageDecoder() })
    }

    @Test func randomChunkingsAndSingleBytesYieldIdenticalMessages() throws {
        let (buffer, messages) = try Self.stream(count: 1_000)
        let bytes = Array(buffer.readableBytesView)
        var generator = SplitMix64(seed: 42)
        var chunkings: [[Int]] = [[1], [bytes.count]]
        for _ in 0..<30 { chunkings.append((0..<64).map { _ in 1 + Int(generator.next() % 700) }) }
        for sizes in chunkings {
            var processor = NIOSingleStepByteToMessageProcessor(WireMessageDecoder())
            var decoded: [WireMessage] = []
            var offset = 0
            var index = 0
            while offset < bytes.count {
                let size = min(sizes[index % sizes.count], bytes.count - offset)
                try processor.process(buffer: ByteBuffer(bytes: bytes[offset..<(offset + size)])) { decoded.append($0) }
                offset += size
                index += 1
            }
            #expect(decoded == messages)
        }
    }

    static func decodeAll(_ bytes: [UInt8]) throws -> [WireMessage] {
        var processor = NIOSingleStepByteToMessageProcessor(WireMessageDecoder())
        var out: [WireMessage] = []
        try processor.process(buffer: ByteBuffer(bytes: bytes)) { out.append($0) }
        return out
    }

    static let validID = Array("abc".utf8) + [UInt8](repeating: 0x20, count: 21)

    @Test func lengthBelowTheMinimumIsAnError() {
        #expect(throws: WireProtocolError.lengthTooSmall(23)) { try Self.decodeAll([0, 0, 0, 23] + Self.validID) }
        #expect(throws: WireProtocolError.lengthTooSmall(24)) { try Self.decodeAll([0, 0, 0, 24] + Self.validID) }
    }

    @Test func lengthAboveTheCapIsAnErrorBeforeTheBodyArrives() {
        #expect(throws: WireProtocolError.lengthTooLarge(65_536)) { try Self.decodeAll([0, 1, 0, 0]) }
        #expect(throws: WireProtocolError.lengthTooLarge(0x00FF_FFFF)) { try Self.decodeAll([0, 0xFF, 0xFF, 0xFF]) }
    }

    @Test func brokenJSONIsAnError() {
        #expect(throws: WireProtocolError.self) { try Self.decodeAll(Array("{\"type\":\n".utf8)) }
    }

    @Test func eventWithoutNewlinePastTheCapIsAnError() {
        let long = Array("{\"type\":\"x\",\"message\":\"".utf8) + [UInt8](repeating: 0x61, count: 70_000)
        #expect(throws: WireProtocolError.eventTooLong(long.count)) { try Self.decodeAll(long) }
    }

    @Test func badIdBytesAreAnError() {
        var id = Self.validID
        id[1] = 0x07
        #expect(throws: WireProtocolError.self) { try Self.decodeAll([0, 0, 0, 25] + id + [1]) }
        var gap = Self.validID
        gap[5] = UInt8(ascii: "x")  // a byte after padding started
        #expect(throws: WireProtocolError.self) { try Self.decodeAll([0, 0, 0, 25] + gap + [1]) }
    }

    @Test func anyOtherFirstByteIsAnError() {
        #expect(throws: WireProtocolError.unexpectedByte(0x41)) { try Self.decodeAll(Array("A".utf8)) }
        #expect(throws: WireProtocolError.unexpectedByte(0x0A)) { try Self.decodeAll([0x0A]) }
    }

    @Test func incompleteInputWaitsInsteadOfFailing() throws {
        #expect(try Self.decodeAll([0, 0, 0]).isEmpty)
        #expect(try Self.decodeAll([0, 0, 0, 30] + Self.validID).isEmpty)
        #expect(try Self.decodeAll(Array(#"{"type":"ready","session_id":"a"}"#.utf8)).isEmpty)
    }

    @Test func anErrorAfterGoodMessagesStillYieldsThemFirst() throws {
        var good = ByteBuffer()
        try good.writeAudioPacket(sessionID: try SessionID("ok"), payload: [1, 2, 3])
        var processor = NIOSingleStepByteToMessageProcessor(WireMessageDecoder())
        var out: [WireMessage] = []
        #expect(throws: WireProtocolError.unexpectedByte(0xFF)) {
            try processor.process(buffer: ByteBuffer(bytes: Array(good.readableBytesView) + [0xFF])) { out.append($0) }
        }
        #expect(out.count == 1)
    }
}
