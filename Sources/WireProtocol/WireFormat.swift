// The constants of the byte layout, in one place.

/// Limits of the engine → router stream.
public enum WireFormat {
    /// Largest value of an audio packet's length field, and longest event line (newline included).
    /// Keeping it under 65,536 guarantees an audio packet's first byte is 0x00.
    public static let maxFrameLength = 65_535
    /// Smallest audio packet length: the 24 id bytes and one payload byte.
    public static let minPacketLength = SessionID.wireLength + 1
}
