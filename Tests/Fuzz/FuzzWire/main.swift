// libFuzzer target: the Router's reader of the engine stream (WireMessageDecoder). Whatever bytes
// arrive, it must yield messages or throw a WireProtocolError — never trap, hang or read past the
// buffer — and it must yield the same messages however the bytes are split into reads. Every
// audio packet it yields must write back to the same bytes.
import NIOCore
import WireProtocol
import CFuzzDriver
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWire(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    let bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    guard let first = bytes.first else { return 0 }
    let input = bytes.dropFirst()
    // The first byte picks how the rest is split into reads (1 to 256 bytes each).
    let whole = decodeAll(input, chunk: input.count)
    let split = decodeAll(input, chunk: Int(first) + 1)
    precondition(whole.messages == split.messages, "the same bytes split differently decoded differently")
    precondition(whole.failed == split.failed, "an error in one split and not the other")
    for case .audio(let packet) in whole.messages {
        var buffer = ByteBuffer()
        do {
            try buffer.writeAudioPacket(packet)
        } catch {
            preconditionFailure("a decoded packet does not write back: \(error)")
        }
        var decoder = WireMessageDecoder()
        precondition((try? decoder.decode(buffer: &buffer)) == .audio(packet), "a packet does not round-trip")
    }
    return 0
}

/// Messages until the input ends or the decoder throws (the Router drops the link at that point).
func decodeAll(_ input: ArraySlice<UInt8>, chunk: Int) -> (messages: [WireMessage], failed: Bool) {
    var decoder = WireMessageDecoder()
    var buffer = ByteBuffer()
    var messages: [WireMessage] = []
    var offset = input.startIndex
    let step = max(chunk, 1)
    repeat {
        let end = min(offset + step, input.endIndex)
        buffer.writeBytes(input[offset..<end])
        offset = end
        do {
            while let message = try decoder.decode(buffer: &buffer) { messages.append(message) }
        } catch {
            return (messages, true)
        }
    } while offset < input.endIndex
    return (messages, false)
}

// libFuzzer runs from here: `FuzzWire CORPUS_DIR… [-flags]`, or with a file to replay it.
exit(tonearm_fuzz_main(CommandLine.argc, CommandLine.unsafeArgv))
