// Wraps a live session's Opus packets in an Ogg Opus stream (RFC 7845 over RFC 3533), so any
// Ogg player — ffplay, VLC, an <audio> element — can listen. A session's stream is written once
// for all its listeners (`ListenFeed`), one 20 ms packet per page; a listener who joins mid-stream
// writes the stream's two header pages for itself and renumbers the pages it gets to follow them
// (`OggCRC.renumbered` mends each checksum without reading the page again), so its stream has no
// hole; their granule positions say the stream began before the listener did, as a live stream
// may (RFC 7845 §4.3). At each new track the
// stream is chained (RFC 3533 §4): the logical stream ends and a new one begins with headers that
// carry the new track's title, just before its first packet, so a player shows the title when
// it plays it.
import NIOCore

/// Builds the pages of one Ogg Opus stream.
struct OggOpusWriter {
    /// The logical stream the next page belongs to.
    private(set) var serial: UInt32
    /// The next page's sequence number. A stream's headers are its pages 0 and 1, which each
    /// listener writes for itself (`headers(serial:sequence:title:artist:)`): audio begins at 2.
    private(set) var sequence: UInt32 = 2
    /// 48 kHz samples written so far: the granule position of the page just written.
    private var granule: Int64 = 0
    /// Whether the current logical stream holds an audio page yet.
    var hasAudio: Bool { sequence > 2 }
    static let samplesPerPacket: Int64 = 960

    init(serial: UInt32 = UInt32.random(in: 1...UInt32.max)) {
        self.serial = serial
    }

    /// The two header pages of stream `serial`, numbered `sequence` and `sequence + 1`:
    /// OpusHead (beginning of stream) and OpusTags with the title and artist.
    static func headers(serial: UInt32, sequence: UInt32, title: String?, artist: String? = nil) -> ByteBuffer {
        var head = ByteBuffer()
        head.writeString("OpusHead")
        head.writeInteger(UInt8(1))  // version
        head.writeInteger(UInt8(2))  // channels
        head.writeInteger(UInt16(0), endianness: .little)  // pre-skip: a live join has nothing to skip
        head.writeInteger(UInt32(48_000), endianness: .little)  // input sample rate
        head.writeInteger(Int16(0), endianness: .little)  // output gain
        head.writeInteger(UInt8(0))  // channel mapping family 0: mono or stereo
        var tags = ByteBuffer()
        tags.writeString("OpusTags")
        let vendor = "Tonearm"
        tags.writeInteger(UInt32(vendor.utf8.count), endianness: .little)
        tags.writeString(vendor)
        let comments = [title.map { "title=\($0)" }, artist.map { "artist=\($0)" }].compactMap { $0 }
        tags.writeInteger(UInt32(comments.count), endianness: .little)
        for comment in comments {
            tags.writeInteger(UInt32(comment.utf8.count), endianness: .little)
            tags.writeString(comment)
        }
        var out = ByteBuffer()
        writePage(head.readableBytesView, flags: 0x02, granule: 0, serial: serial, sequence: sequence, into: &out)
        writePage(tags.readableBytesView, flags: 0x00, granule: 0, serial: serial, sequence: sequence &+ 1, into: &out)
        return out
    }

    /// Ends this logical stream (a page without packets, marked end of stream) and begins the
    /// next one: a new serial, its pages and granule from 0, its headers with `title`. Put just
    /// before the new track's first packet. The end of stream page comes first, 27 bytes long.
    mutating func chain(title: String?, artist: String? = nil) -> ByteBuffer {
        var out = ByteBuffer()
        Self.writePage(nil, flags: 0x04, granule: granule, serial: serial, sequence: sequence, into: &out)
        var next = UInt32.random(in: 1...UInt32.max)
        while next == serial { next = UInt32.random(in: 1...UInt32.max) }
        serial = next
        sequence = 2
        granule = 0
        var headers = Self.headers(serial: serial, sequence: 0, title: title, artist: artist)
        out.writeBuffer(&headers)
        return out
    }

    /// The largest packet one page holds: 255 lacing values, the last under 255. An Opus packet
    /// is at most 61,200 bytes (RFC 6716: 48 frames of 1,275); anything larger is not one.
    static let maxPacket = 254 * 255 + 254

    /// Appends one page holding one 20 ms Opus packet to `out`, and gives back the page's
    /// `OggCRC.shift` (for renumbering it); nil (and nothing written) for a packet no page can hold.
    @discardableResult
    mutating func append(_ packet: ByteBuffer, to out: inout ByteBuffer) -> UInt32? {
        guard packet.readableBytes <= Self.maxPacket else { return nil }
        granule += Self.samplesPerPacket
        let start = out.writerIndex
        Self.writePage(packet.readableBytesView, flags: 0x00, granule: granule, serial: serial, sequence: sequence, into: &out)
        sequence &+= 1
        return OggCRC.shift(for: out.writerIndex - start)
    }

    /// One page holding one 20 ms Opus packet (empty for a packet no page can hold).
    mutating func page(for packet: ByteBuffer) -> ByteBuffer {
        var out = ByteBuffer()
        append(packet, to: &out)
        return out
    }

    /// A page with `packet`, or with no packet at all (nil: no segments).
    private static func writePage(
        _ packet: ByteBufferView?, flags: UInt8, granule: Int64, serial: UInt32, sequence: UInt32, into out: inout ByteBuffer
    ) {
        // Lacing: 255-byte segments, then the remainder (a 0 ends a packet of a multiple of 255).
        let count = packet?.count ?? 0
        let segments = packet == nil ? 0 : count / 255 + 1
        let start = out.writerIndex
        out.reserveCapacity(minimumWritableBytes: 27 + segments + count)
        out.writeString("OggS")
        out.writeInteger(UInt8(0))  // version
        out.writeInteger(flags)
        out.writeInteger(granule, endianness: .little)
        out.writeInteger(serial, endianness: .little)
        out.writeInteger(sequence, endianness: .little)
        let crcAt = out.writerIndex
        out.writeInteger(UInt32(0), endianness: .little)
        out.writeInteger(UInt8(truncatingIfNeeded: segments))
        if let packet {
            for _ in 0..<(count / 255) { out.writeInteger(UInt8(255)) }
            out.writeInteger(UInt8(count % 255))
            out.writeBytes(packet)
        }
        let crc = OggCRC.checksum(out.readableBytesView[start...])
        out.setInteger(crc, at: crcAt, endianness: .little)
    }
}

/// Ogg's CRC-32: polynomial 0x04C11DB7, not reflected, initial value 0.
enum OggCRC {
    static let table: [UInt32] = (0..<256).map { index in
        var r = UInt32(index) << 24
        for _ in 0..<8 { r = r & 0x8000_0000 != 0 ? (r << 1) ^ 0x04C1_1DB7 : r << 1 }
        return r
    }

    static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0
        for byte in bytes { crc = (crc << 8) ^ table[Int(((crc >> 24) & 0xFF) ^ UInt32(byte))] }
        return crc
    }

    // Renumbering a page without reading it again. The checksum is linear (no initial value, no
    // final xor): changing the sequence field (bytes 18–21) by `d` changes the checksum by the
    // checksum of `d` followed by the page's remaining bytes as zeros, i.e. by checksum(d) times
    // x^(8·n) modulo the polynomial, n the bytes after the field.

    /// x^(8·n) modulo the polynomial for the `n` bytes that follow a page's sequence field;
    /// computed once per page by whoever writes it.
    static func shift(for pageLength: Int) -> UInt32 {
        var n = max(0, pageLength - 22)
        var result: UInt32 = 1
        var power: UInt32 = 0x100  // x^8
        while n > 0 {
            if n & 1 == 1 { result = multiply(result, power) }
            power = multiply(power, power)
            n >>= 1
        }
        return result
    }

    /// The checksum of a page whose sequence number `old` becomes `new` (`shift` from `shift(for:)`).
    static func renumbered(_ checksum: UInt32, from old: UInt32, to new: UInt32, shift: UInt32) -> UInt32 {
        let change = (old ^ new).littleEndian
        let field = withUnsafeBytes(of: change) { Self.checksum($0) }
        return checksum ^ multiply(field, shift)
    }

    /// The `shift` of a page without packets (a chain's end of stream).
    static let emptyPageShift = shift(for: 27)

    /// a·b modulo the polynomial (x^32 + 0x04C11DB7), over GF(2).
    static func multiply(_ a: UInt32, _ b: UInt32) -> UInt32 {
        var result: UInt32 = 0
        for bit in (0..<32).reversed() {
            result = result & 0x8000_0000 != 0 ? (result << 1) ^ 0x04C1_1DB7 : result << 1
            if (b >> UInt32(bit)) & 1 == 1 { result ^= a }
        }
        return result
    }
}
