// One 20 ms Opus packet of one session: `[u32 BE length = 24 + n][24-byte padded id][n bytes]`.
public import NIOCore

/// An audio packet as it travels from the engine to the router.
public struct AudioPacket: Hashable, Sendable {
    public var sessionID: SessionID
    /// One Opus packet holding 20 ms of 48 kHz stereo audio.
    public var payload: ByteBuffer

    public init(sessionID: SessionID, payload: ByteBuffer) {
        self.sessionID = sessionID
        self.payload = payload
    }
}

extension ByteBuffer {
    /// Appends `packet` in wire form.
    @discardableResult
    public mutating func writeAudioPacket(_ packet: AudioPacket) throws(WireProtocolError) -> Int {
        try writeAudioPacket(sessionID: packet.sessionID, payload: packet.payload.readableBytesView)
    }

    /// Appends one audio packet in wire form without building an `AudioPacket` first.
    @discardableResult
    public mutating func writeAudioPacket(
        sessionID: SessionID, payload: some Collection<UInt8>
    ) throws(WireProtocolError) -> Int {
        let length = SessionID.wireLength + payload.count
        guard length <= WireFormat.maxFrameLength else { throw .payloadTooLarge(payload.count) }
        guard !payload.isEmpty else { throw .lengthTooSmall(length) }
        var written = writeInteger(UInt32(length), endianness: .big)
        written += sessionID.withPaddedBytes { writeBytes($0) }
        written += writeBytes(payload)
        return written
    }
}
