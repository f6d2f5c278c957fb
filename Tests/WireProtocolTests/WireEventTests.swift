import Foundation
import NIOCore
import Testing
import WireProtocol

@Suite struct WireEventTests {
    @Test func eventIsOneJSONLineWithTypeAndSessionID() throws {
        var buffer = ByteBuffer()
        buffer.writeEvent(WireEvent(type: .finished, sessionID: try SessionID("42"), playID: 7, reason: .stopped))
        let text = String(buffer: buffer)
        #expect(text == #"{"play_id":7,"reason":"stopped","session_id":"42","type":"finished"}"# + "\n")
    }

    @Test func hostileStringsRoundTrip() throws {
        let message = "quote \" brace { } newline \n backslash \\ tab \t null \u{0} emoji 🎵 slash /"
        let event = WireEvent(type: .error, sessionID: try SessionID("s"), code: "x", message: message, title: "}\n{")
        let line = event.jsonLine()
        #expect(!line.contains("\n"))
        #expect(try WireEvent(jsonLine: Array(line.utf8)) == event)
    }

    @Test(arguments: [
        (#"{"type":"ready"}"#, "session_id"),
        (#"{"session_id":"a"}"#, "type"),
        (#"{"type":"ready","session_id":"has space"}"#, "a space"),
        (#"{"type":"ready","session_id":5}"#, "session_id"),
        (#"{"type":"ready","#, "JSON"),
        ("[1,2]", "object"),
    ])
    func malformedEventsAreTypedErrors(line: String, mention: String) {
        #expect {
            try WireEvent(jsonLine: Array(line.utf8))
        } throws: { error in
            guard case .malformedEvent(let why) = error as? WireProtocolError else { return false }
            return why.localizedCaseInsensitiveContains(mention) || mention == "JSON" || mention == "object"
        }
    }

    @Test func unknownFieldsAndTypesPassThrough() throws {
        let event = try WireEvent(jsonLine: Array(#"{"type":"future","session_id":"a","extra":[1]}"#.utf8))
        #expect(event.type == EventType("future"))
    }
}
