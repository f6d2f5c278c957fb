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

    /// A source's tags can hold anything: a 100 KB title of characters JSON must escape, a URL
    /// as long, a single "character" of 50,000 combining marks. The line stays one a reader
    /// accepts, and the cut strings end in "…".
    @Test(arguments: [
        String(repeating: "\u{01}", count: 100_000),
        String(repeating: "é", count: 100_000),
        "a" + String(repeating: "\u{0301}", count: 50_000),
    ])
    func everyStringIsBoundedSoALineAlwaysFitsTheWire(text: String) throws {
        var event = WireEvent(
            type: .ready, sessionID: try SessionID("guild"), playID: .max, code: text, message: text, url: text,
            title: text, durationMS: .max, positionMS: .min, volume: .min, passthrough: true, layerID: .max, artist: text)
        event.title = text  // set after init too
        event.artist = text
        var buffer = ByteBuffer()
        let written = buffer.writeEvent(event)
        #expect(written <= WireEvent.maxLineBytes)
        #expect(WireEvent.maxLineBytes < WireFormat.maxFrameLength)
        var decoder = WireMessageDecoder()
        guard case .event(let decoded, _)? = try decoder.decode(buffer: &buffer) else {
            Issue.record("the line did not decode as an event")
            return
        }
        #expect((decoded.title?.utf8.count ?? .max) <= WireEvent.Limit.title)
        #expect((decoded.artist?.utf8.count ?? .max) <= WireEvent.Limit.artist)
        #expect((decoded.url?.utf8.count ?? .max) <= WireEvent.Limit.url)
        #expect(decoded.title?.hasSuffix("…") == true)
        #expect(decoded.url.map { text.hasPrefix($0.dropLast()) } == true)
    }

    @Test func shortStringsAreKeptWhole() throws {
        let event = WireEvent(type: .ready, sessionID: try SessionID("g"), title: "Ünïcødé title")
        #expect(event.title == "Ünïcødé title")
        #expect(WireEvent.bounded(String(repeating: "x", count: 10), 10) == String(repeating: "x", count: 10))
        #expect(WireEvent.bounded(String(repeating: "x", count: 11), 10) == String(repeating: "x", count: 7) + "…")
    }
}
