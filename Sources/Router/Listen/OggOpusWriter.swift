// Wraps a live session's Opus packets in an Ogg Opus stream (RFC 7845 over RFC 3533), so any
// Ogg player — ffplay, VLC, an <audio> element — can listen. Every listener gets its own stream:
// OpusHead and OpusTags first, then one 20 ms packet per page, so a listener joining mid-stream
// starts on valid headers and hears audio within a page. At each new track the stream is chained
// (RFC 3533 §4): the logical stream ends and a new one begins with headers that carry the new
// track's title, just before its first packet, so a player shows the title when it plays it.
import NIOCore

/// Builds the pages of one Ogg Opus stream.
struct OggOpusWriter {
    private var serial: UInt32
    private var sequence: UInt32 = 0
    /// 48 kHz samples written so far: the granule position of the page just written.
    private var granule: Int64 = 0
    static let samplesPerPacket: Int64 = 960

    init(serial: UInt32 = UInt32.random(in: 1...UInt32.max)) {
        self.serial = serial
    }

    /// The two header pages: OpusHead (beginning of stream) and OpusTags.
    mutating func headers(title: String?, artist: String? = nil) -> ByteBuffer {
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
        writePage(head.readableBytesView, flags: 0x02, granule: 0, into: &out)
        writePage(tags.readableBytesView, flags: 0x00, granule: 0, into: &out)
        return out
    }

    /// Ends this logical stream (a page without packets, marked end of stream) and begins the
    /// next one: a new serial, its pages and granule from 0, its headers with `title`. Put just
    /// before the new track's first packet.
    mutating func chain(title: String?, artist: String? = nil) -> ByteBuffer {
        var out = ByteBuffer()
        writePage(nil, flags: 0x04, granule: granule, into: &out)
        var next = UInt32.random(in: 1...UInt32.max)
        while next == serial { next = UInt32.random(in: 1...UInt32.max) }
        serial = next
        sequence = 0
        granule = 0
        var headers = headers(title: title, artist: artist)
        out.writeBuffer(&headers)
        return out
    }

    /// One page holding one 20 ms Opus packet.
    mutating func page(for packet: ByteBuffer) -> ByteBuffer {
        granule += Self.samplesPerPacket
        var out = ByteBuffer()
        writePage(packet.readableBytesView, flags: 0x00, granule: granule, into: &out)
        return out
    }

    /// A page with `packet`, or with no packet at all (nil: no segments).
    private mutating func writePage(
        _ packet: ByteBufferView?, flags: UInt8, granule: Int64, into out: inout ByteBuffer
    ) {
        // Lacing: 255-byte segments, then the remainder (a 0 ends a packet of a multiple of 255).
        var lacing: [UInt8] = []
        if let packet {
            lacing = [UInt8](repeating: 255, count: packet.count / 255)
            lacing.append(UInt8(packet.count % 255))
        }
        let start = out.writerIndex
        out.writeString("OggS")
        out.writeInteger(UInt8(0))  // version
        out.writeInteger(flags)
        out.writeInteger(granule, endianness: .little)
        out.writeInteger(serial, endianness: .little)
        out.writeInteger(sequence, endianness: .little)
        let crcAt = out.writerIndex
        out.writeInteger(UInt32(0), endianness: .little)
        out.writeInteger(UInt8(lacing.count))
        out.writeBytes(lacing)
        if let packet { out.writeBytes(packet) }
        let crc = OggCRC.checksum(out.readableBytesView[start...])
        out.setInteger(crc, at: crcAt, endianness: .little)
        sequence += 1
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
}
