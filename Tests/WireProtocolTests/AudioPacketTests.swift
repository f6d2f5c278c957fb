import NIOCore
import Testing
import WireProtocol

@Suite struct AudioPacketTests {
    @Test func goldenVectorOfTheDesignExample() throws {
        let id = try SessionID("1234567890123456789")
        var buffer = ByteBuffer()
        let written = try buffer.writeAudioPacket(AudioPacket(sessionID: id, payload: ByteBuffer(bytes: [0xF8, 0xFF, 0xFE])))
        let expected: [UInt8] =
            [0x00, 0x00, 0x00, 0x1B]  // 24 + 3
            + Array("1234567890123456789".utf8) + [0x20, 0x20, 0x20, 0x20, 0x20]
            + [0xF8, 0xFF, 0xFE]
        #expect(Array(buffer.readableBytesView) == expected)
        #expect(written == 31)
    }

    @Test func goldenVectorOfAShortIdAndLargerPayload() throws {
        var buffer = ByteBuffer()
        let payload = [UInt8](0..<200)
        try buffer.writeAudioPacket(sessionID: try SessionID("g1"), payload: payload)
        var expected: [UInt8] = [0x00, 0x00, 0x00, 0xE0, UInt8(ascii: "g"), UInt8(ascii: "1")]
        expected += [UInt8](repeating: 0x20, count: 22)
        expected += payload
        #expect(Array(buffer.readableBytesView) == expected)
    }

    @Test func payloadsThatDoNotFitAreRefused() throws {
        var buffer = ByteBuffer()
        let id = try SessionID("a")
        #expect(throws: WireProtocolError.payloadTooLarge(65_512)) {
            try buffer.writeAudioPacket(sessionID: id, payload: [UInt8](repeating: 1, count: 65_512))
        }
        #expect(throws: WireProtocolError.lengthTooSmall(24)) {
            try buffer.writeAudioPacket(sessionID: id, payload: [UInt8]())
        }
        #expect(buffer.readableBytes == 0)
        // The largest payload that fits keeps the first byte 0x00.
        try buffer.writeAudioPacket(sessionID: id, payload: [UInt8](repeating: 1, count: 65_511))
        #expect(buffer.getInteger(at: 0, as: UInt8.self) == 0)
    }
}
