// The identity of one audio session on the wire: 1–24 bytes of printable ASCII without spaces,
// carried right-padded with spaces to exactly 24 bytes in front of every audio packet.

/// A validated session id, stored inline as its 24 padded wire bytes so that hashing and
/// comparing it on the hot path never allocates.
public struct SessionID: Hashable, Sendable, CustomStringConvertible {
    /// The number of bytes an id occupies on the wire.
    public static let wireLength = 24

    /// The id engine-wide events (`load`) carry: no session may have it (the engine refuses a
    /// play on it), so a reader can tell them from a session's.
    public static let engine: SessionID = {
        do { return try SessionID("*") } catch { fatalError("\"*\" is a valid session id") }
    }()

    // The padded wire bytes, little-endian packed: byte i of the id is byte (i % 8) of word i / 8.
    @usableFromInline let w0: UInt64
    @usableFromInline let w1: UInt64
    @usableFromInline let w2: UInt64
    /// Number of significant (unpadded) bytes, 1...24.
    public let count: Int

    /// Validates `string` as a session id.
    public init(_ string: String) throws(WireProtocolError) {
        try self.init(bytes: Array(string.utf8))
    }

    /// Validates unpadded id bytes.
    public init(bytes: some Collection<UInt8>) throws(WireProtocolError) {
        guard !bytes.isEmpty else {
            throw .invalidSessionID("a session id must not be empty (1 to 24 printable ASCII characters, no spaces)")
        }
        guard bytes.count <= Self.wireLength else {
            throw .invalidSessionID(
                "a session id is at most 24 bytes, this one has \(bytes.count) (1 to 24 printable ASCII characters, no spaces)")
        }
        var words: (UInt64, UInt64, UInt64) = (Self.spaces, Self.spaces, Self.spaces)
        var index = 0
        for byte in bytes {
            guard byte > 0x20, byte < 0x7F else {
                throw .invalidSessionID(
                    "byte \(index) of the session id is \(Self.describe(byte)); only printable ASCII without spaces is accepted")
            }
            Self.set(byte, at: index, in: &words)
            index += 1
        }
        self.w0 = words.0
        self.w1 = words.1
        self.w2 = words.2
        self.count = bytes.count
    }

    /// Parses the 24 padded bytes of the wire form: significant bytes first, then only spaces.
    public init(paddedBytes bytes: some Collection<UInt8>) throws(WireProtocolError) {
        guard bytes.count == Self.wireLength else {
            throw .invalidSessionID("a padded session id is exactly 24 bytes, got \(bytes.count)")
        }
        var significant = 0
        var sawPadding = false
        for (index, byte) in bytes.enumerated() {
            if byte == 0x20 {
                sawPadding = true
            } else if sawPadding {
                throw .invalidSessionID(
                    "byte \(index) of the padded session id follows padding; the id must be right-padded with spaces")
            } else {
                significant += 1
            }
        }
        try self.init(bytes: bytes.prefix(significant))
    }

    /// The id as text, without padding.
    public var description: String {
        var bytes = [UInt8]()
        bytes.reserveCapacity(count)
        withPaddedBytes { padded in bytes.append(contentsOf: padded.prefix(count)) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Calls `body` with the 24 padded wire bytes.
    @inlinable
    public func withPaddedBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        var words = (w0.littleEndian, w1.littleEndian, w2.littleEndian)
        return try withUnsafeBytes(of: &words) { try body($0) }
    }

    private static let spaces: UInt64 = 0x2020_2020_2020_2020

    private static func set(_ byte: UInt8, at index: Int, in words: inout (UInt64, UInt64, UInt64)) {
        let shift = UInt64((index % 8) * 8)
        let mask = ~(UInt64(0xFF) << shift)
        let value = UInt64(byte) << shift
        switch index / 8 {
        case 0: words.0 = (words.0 & mask) | value
        case 1: words.1 = (words.1 & mask) | value
        default: words.2 = (words.2 & mask) | value
        }
    }

    private static func describe(_ byte: UInt8) -> String {
        byte == 0x20 ? "a space" : "0x" + String(byte, radix: 16, uppercase: true)
    }
}

extension SessionID: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let string = try container.decode(String.self)
        do {
            try self.init(string)
        } catch {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: error.description)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
