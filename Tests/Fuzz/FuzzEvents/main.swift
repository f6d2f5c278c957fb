// libFuzzer target: one-line JSON events (WireEvent). Any line either parses or throws a
// WireProtocolError; a parsed event writes back to a line that parses to the same event; and an
// event built from any strings — a source's tags, a URL, an error message — writes a line no
// longer than `WireEvent.maxLineBytes`, which every reader accepts.
import Foundation
import WireProtocol
import CFuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEvents(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: start, count: count)
    if let event = try? WireEvent(jsonLine: bytes) {
        let line = event.jsonLine()
        guard let again = try? WireEvent(jsonLine: Array(line.utf8)) else {
            preconditionFailure("a parsed event wrote a line that does not parse: \(line)")
        }
        precondition(again == event, "an event changed on its way back: \(line)")
        // The engine never writes unbounded strings: rebuilt through init, the line is bounded.
        let rebuilt = WireEvent(
            type: event.type, sessionID: event.sessionID, playID: event.playID, reason: event.reason,
            code: event.code, message: event.message, url: event.url, title: event.title,
            durationMS: event.durationMS, positionMS: event.positionMS, volume: event.volume,
            passthrough: event.passthrough)
        precondition(rebuilt.jsonLine().utf8.count <= WireEvent.maxLineBytes, "a rebuilt event is too long")
    }
    // The same bytes as every string field of an event the engine writes.
    let text = String(decoding: bytes, as: UTF8.self)
    guard let id = try? SessionID("fuzz") else { return 0 }
    let event = WireEvent(type: .error, sessionID: id, code: text, message: text, url: text, title: text)
    let line = event.jsonLine()
    precondition(line.utf8.count <= WireEvent.maxLineBytes, "an event line of \(line.utf8.count) bytes")
    precondition(!line.utf8.contains(UInt8(ascii: "\n")), "a newline inside an event line")
    precondition((try? WireEvent(jsonLine: Array(line.utf8))) == event, "a bounded event does not round-trip")
    return 0
}

// libFuzzer runs from here: `FuzzEvents CORPUS_DIR… [-flags]`, or with a file to replay it.
exit(tonearm_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv))
