// The incremental reader of the engine → router stream. It yields the same messages however the
// bytes are split into reads, and throws a `WireProtocolError` at the first malformed byte.
public import NIOCore

/// Decodes `WireMessage`s from a byte stream; use with `NIOSingleStepByteToMessageProcessor`
/// or a `ByteToMessageHandler`.
public struct WireMessageDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = WireMessage

    /// How many bytes of a pending event line are known to hold no newline, so a line arriving
    /// in many reads is scanned once, not once per read.
    private var scannedEventBytes = 0

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> WireMessage? {
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else { return nil }
        switch first {
        case UInt8(ascii: "{"):
            return try decodeEvent(&buffer)
        case 0x00:
            return try decodeAudio(&buffer)
        default:
            throw WireProtocolError.unexpectedByte(first)
        }
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> WireMessage? {
        try decode(buffer: &buffer)
    }

    private mutating func decodeEvent(_ buffer: inout ByteBuffer) throws(WireProtocolError) -> WireMessage? {
        let view = buffer.readableBytesView
        let searchable = view.prefix(WireFormat.maxFrameLength)
        guard let newline = searchable.dropFirst(scannedEventBytes).firstIndex(of: UInt8(ascii: "\n")) else {
            if view.count >= WireFormat.maxFrameLength { throw .eventTooLong(view.count) }
            scannedEventBytes = searchable.count
            return nil
        }
        scannedEventBytes = 0
        let line = view[view.startIndex..<newline]
        let event = try WireEvent(jsonLine: line)
        buffer.moveReaderIndex(forwardBy: line.count + 1)
        return .event(event, line: String(decoding: line, as: UTF8.self))
    }

    private func decodeAudio(_ buffer: inout ByteBuffer) throws(WireProtocolError) -> WireMessage? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self) else {
            return nil
        }
        let frameLength = Int(length)
        guard frameLength >= WireFormat.minPacketLength else { throw .lengthTooSmall(frameLength) }
        guard frameLength <= WireFormat.maxFrameLength else { throw .lengthTooLarge(frameLength) }
        guard buffer.readableBytes >= 4 + frameLength else { return nil }
        let idStart = buffer.readerIndex + 4
        let view = buffer.readableBytesView
        let idBytes = view.dropFirst(4).prefix(SessionID.wireLength)
        let id = try SessionID(paddedBytes: idBytes)
        let payload = buffer.getSlice(
            at: idStart + SessionID.wireLength, length: frameLength - SessionID.wireLength)!
        buffer.moveReaderIndex(forwardBy: 4 + frameLength)
        return .audio(AudioPacket(sessionID: id, payload: payload))
    }
}
