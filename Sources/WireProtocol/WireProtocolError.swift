// Every way the bytes between AudioEngine and Router can be wrong. A reader that meets one of
// these closes the connection and reconnects; it never guesses where the next message starts.

/// A malformed session id or message on the engine → router stream.
public enum WireProtocolError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The id is empty, too long, or holds a byte outside printable ASCII (or a space).
    case invalidSessionID(String)
    /// An audio packet's length field is below the minimum (24 id bytes + at least 1 payload byte).
    case lengthTooSmall(Int)
    /// An audio packet's length field exceeds `WireFormat.maxFrameLength`.
    case lengthTooLarge(Int)
    /// An event line is longer than `WireFormat.maxFrameLength` without a newline.
    case eventTooLong(Int)
    /// An event line is not a JSON object with string `type` and a valid `session_id`.
    case malformedEvent(String)
    /// A message starts with a byte that is neither `{` (event) nor `0x00` (audio packet).
    case unexpectedByte(UInt8)
    /// A payload given to the encoder does not fit in one frame.
    case payloadTooLarge(Int)

    public var description: String {
        switch self {
        case .invalidSessionID(let why): "invalid session id: \(why)"
        case .lengthTooSmall(let n):
            "audio packet length \(n) is too small: it must be at least \(WireFormat.minPacketLength) (24 id bytes and a payload)"
        case .lengthTooLarge(let n):
            "audio packet length \(n) exceeds the cap of \(WireFormat.maxFrameLength) bytes"
        case .eventTooLong(let n):
            "event line of more than \(n) bytes without a newline exceeds the cap of \(WireFormat.maxFrameLength) bytes"
        case .malformedEvent(let why): "malformed event: \(why)"
        case .unexpectedByte(let b):
            "unexpected byte 0x\(String(b, radix: 16, uppercase: true)) at a message start: expected '{' (event) or 0x00 (audio packet)"
        case .payloadTooLarge(let n):
            "an audio payload of \(n) bytes does not fit in one frame (at most \(WireFormat.maxFrameLength - SessionID.wireLength))"
        }
    }
}
