import Testing
import WireProtocol

@Suite struct SessionIDTests {
    @Test func snowflakeIsPaddedWithSpacesTo24Bytes() throws {
        let id = try SessionID("1234567890123456789")
        let padded = id.withPaddedBytes { Array($0) }
        #expect(padded == Array("1234567890123456789     ".utf8))
        #expect(id.description == "1234567890123456789")
        #expect(id.count == 19)
    }

    @Test func twentyFourBytesNeedNoPadding() throws {
        let text = String(repeating: "x", count: 24)
        let id = try SessionID(text)
        #expect(id.withPaddedBytes { Array($0) } == Array(text.utf8))
    }

    @Test func paddedFormRoundTrips() throws {
        for text in ["a", "guild-42", "1234567890123456789", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}", String(repeating: "9", count: 24)] {
            let id = try SessionID(String(text.prefix(24)))
            let again = try SessionID(paddedBytes: id.withPaddedBytes { Array($0) })
            #expect(again == id)
            #expect(again.description == String(text.prefix(24)))
        }
    }

    @Test func equalIdsHashEqually() throws {
        let set: Set<SessionID> = [try SessionID("abc"), try SessionID("abc"), try SessionID("abd")]
        #expect(set.count == 2)
    }

    @Test(arguments: [
        ("", "must not be empty"),
        (String(repeating: "1", count: 25), "at most 24 bytes"),
        ("has space", "a space"),
        ("tab\t", "0x9"),
        ("caf\u{E9}", "0xC3"),
        ("del\u{7F}", "0x7F"),
    ])
    func invalidIdsAreRefusedWithAReason(text: String, reason: String) {
        #expect {
            try SessionID(text)
        } throws: { error in
            guard case .invalidSessionID(let message) = error as? WireProtocolError else { return false }
            return message.contains(reason)
        }
    }

    @Test func paddingMustBeTrailing() {
        let bytes = Array("ab cd                   ".utf8)
        #expect(bytes.count == 24)
        #expect(throws: WireProtocolError.self) { try SessionID(paddedBytes: bytes) }
        #expect(throws: WireProtocolError.self) { try SessionID(paddedBytes: Array(repeating: UInt8(0x20), count: 24)) }
        #expect(throws: WireProtocolError.self) { try SessionID(paddedBytes: Array("short".utf8)) }
    }
}
