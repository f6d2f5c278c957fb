// The Ogg Opus stream of /listen (Listen/OggOpusWriter.swift) read back page by page as RFC 3533
// and RFC 7845 lay it out, with the page checksum computed here bit by bit (not with the writer's
// table), so a wrong table or a wrong field order fails.
import NIOCore
import Testing

@testable import TonearmRouter

@Suite struct OggOpusWriterTests {
    struct Page {
        var flags: UInt8
        var granule: Int64
        var serial: UInt32
        var sequence: UInt32
        var checksum: UInt32
        var lacing: [UInt8]
        var body: [UInt8]
        var bytes: [UInt8]
    }

    /// Splits `buffer` into pages; nil where the bytes are not Ogg pages.
    func readPages(_ buffer: ByteBuffer) -> [Page]? {
        var buffer = buffer
        let all = Array(buffer.readableBytesView)
        let base = buffer.readerIndex
        var pages: [Page] = []
        while buffer.readableBytes > 0 {
            let start = buffer.readerIndex
            guard buffer.readString(length: 4) == "OggS", buffer.readInteger(as: UInt8.self) == 0,
                let flags = buffer.readInteger(as: UInt8.self),
                let granule = buffer.readInteger(endianness: .little, as: Int64.self),
                let serial = buffer.readInteger(endianness: .little, as: UInt32.self),
                let sequence = buffer.readInteger(endianness: .little, as: UInt32.self),
                let checksum = buffer.readInteger(endianness: .little, as: UInt32.self),
                let count = buffer.readInteger(as: UInt8.self), let lacing = buffer.readBytes(length: Int(count))
            else { return nil }
            guard let body = buffer.readBytes(length: lacing.reduce(0) { $0 + Int($1) }) else { return nil }
            let bytes = Array(all[(start - base)..<(buffer.readerIndex - base)])
            pages.append(Page(flags: flags, granule: granule, serial: serial, sequence: sequence, checksum: checksum, lacing: lacing, body: body, bytes: bytes))
        }
        return pages
    }

    /// RFC 3533's CRC: polynomial 0x04C11DB7, initial 0, not reflected, over the page with its
    /// checksum field zeroed — one bit at a time.
    func checksum(_ page: [UInt8]) -> UInt32 {
        var bytes = page
        for index in 22..<26 { bytes[index] = 0 }
        var crc: UInt32 = 0
        for byte in bytes {
            crc ^= UInt32(byte) << 24
            for _ in 0..<8 { crc = crc & 0x8000_0000 != 0 ? (crc << 1) ^ 0x04C1_1DB7 : crc << 1 }
        }
        return crc
    }

    @Test func headersThenOnePacketPerPageWithTheirPositions() throws {
        var writer = OggOpusWriter(serial: 0xA1B2_C3D4)
        var stream = OggOpusWriter.headers(serial: writer.serial, sequence: 0, title: "Tone")
        for size in [3, 255, 600] { stream.writeImmutableBuffer(writer.page(for: ByteBuffer(repeating: 7, count: size))) }
        let pages = try #require(readPages(stream))
        #expect(pages.count == 5)
        #expect(pages.map(\.sequence) == [0, 1, 2, 3, 4])
        #expect(Set(pages.map(\.serial)) == [0xA1B2_C3D4])
        #expect(pages.map(\.flags) == [0x02, 0, 0, 0, 0])  // beginning of stream on the first only
        #expect(pages.map(\.granule) == [0, 0, 960, 1920, 2880])
        for page in pages { #expect(page.checksum == checksum(page.bytes), "page \(page.sequence)") }

        // OpusHead: version 1, 2 channels, no pre-skip, 48 kHz, gain 0, mapping family 0.
        let head = pages[0].body
        #expect(head.count == 19 && Array(head[0..<8]) == Array("OpusHead".utf8))
        #expect(head[8] == 1 && head[9] == 2 && head[10] == 0 && head[11] == 0)
        #expect(Array(head[12..<16]) == [0x80, 0xBB, 0x00, 0x00] && head[18] == 0)
        // OpusTags: vendor, then the title as a comment.
        let tags = pages[1].body
        #expect(Array(tags[0..<8]) == Array("OpusTags".utf8))
        #expect(String(decoding: tags.suffix(10), as: UTF8.self) == "title=Tone")

        // Lacing: 255-byte segments then the rest; a multiple of 255 ends with a 0.
        #expect(pages[2].lacing == [3])
        #expect(pages[3].lacing == [255, 0])
        #expect(pages[4].lacing == [255, 255, 90])
        #expect(pages[4].body.count == 600)
    }

    @Test func withoutATitleTheTagsHoldNoComment() throws {
        let pages = try #require(readPages(OggOpusWriter.headers(serial: 1, sequence: 0, title: nil)))
        let tags = pages[1].body
        // "OpusTags", vendor length 7, "Tonearm", comment count 0.
        #expect(tags.count == 8 + 4 + 7 + 4)
        #expect(Array(tags.suffix(4)) == [0, 0, 0, 0])
    }

    /// A chain: the first stream ends with a page without packets marked end of stream (at its
    /// last granule), then a second stream with another serial begins (its headers, sequence and
    /// granule from 0) and carries the new title; every page's checksum holds.
    @Test func aNewTrackChainsAStreamWithItsTitle() throws {
        var writer = OggOpusWriter(serial: 0x1111_1111)
        var stream = OggOpusWriter.headers(serial: writer.serial, sequence: 0, title: "First")
        for _ in 0..<3 { stream.writeImmutableBuffer(writer.page(for: ByteBuffer(repeating: 1, count: 40))) }
        stream.writeImmutableBuffer(writer.chain(title: "Second"))
        stream.writeImmutableBuffer(writer.page(for: ByteBuffer(repeating: 2, count: 40)))
        let pages = try #require(readPages(stream))
        #expect(pages.count == 2 + 3 + 1 + 2 + 1)
        for page in pages { #expect(checksum(page.bytes) == page.checksum) }
        let end = pages[5]
        #expect(end.flags == 0x04 && end.lacing.isEmpty && end.granule == 3 * 960 && end.serial == 0x1111_1111 && end.sequence == 5)
        let (head, tags, first) = (pages[6], pages[7], pages[8])
        #expect(head.flags == 0x02 && head.serial != 0x1111_1111 && head.sequence == 0 && head.body.starts(with: Array("OpusHead".utf8)))
        #expect(tags.serial == head.serial && tags.sequence == 1 && String(decoding: tags.body, as: UTF8.self).contains("title=Second"))
        #expect(first.serial == head.serial && first.granule == 960 && first.sequence == 2)
    }

    /// A packet no page can hold (more than 255 lacing values) is left out, not wrapped in a
    /// page whose lacing count wrapped around: the stream goes on valid, its positions unmoved.
    @Test func aPacketNoPageCanHoldIsLeftOut() throws {
        var writer = OggOpusWriter(serial: 7)
        var stream = OggOpusWriter.headers(serial: 7, sequence: 0, title: nil)
        #expect(writer.page(for: ByteBuffer(repeating: 1, count: OggOpusWriter.maxPacket + 1)).readableBytes == 0)
        stream.writeImmutableBuffer(writer.page(for: ByteBuffer(repeating: 1, count: OggOpusWriter.maxPacket)))
        stream.writeImmutableBuffer(writer.page(for: ByteBuffer(repeating: 2, count: 10)))
        let pages = try #require(readPages(stream))
        #expect(pages.map(\.sequence) == [0, 1, 2, 3] && pages.map(\.granule) == [0, 0, 960, 1920])
        #expect(pages[2].lacing.count == 255 && pages[2].body.count == OggOpusWriter.maxPacket)
        for page in pages { #expect(checksum(page.bytes) == page.checksum) }
    }

    /// A page renumbered by `OggCRC.renumbered` has the checksum a full recomputation gives, for
    /// pages of every length a packet makes and any change of number.
    @Test func aRenumberedPagesChecksumIsTheRecomputedOne() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            var writer = OggOpusWriter(serial: .random(in: 1...UInt32.max, using: &generator))
            for _ in 0..<Int.random(in: 0..<40, using: &generator) { _ = writer.page(for: ByteBuffer(bytes: [1])) }
            let size = Int.random(in: 0...3_000, using: &generator)
            var page = ByteBuffer()
            let shift = try #require(writer.append(ByteBuffer(bytes: (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }), to: &page))
            let old = try #require(page.getInteger(at: 18, endianness: .little, as: UInt32.self))
            let stored = try #require(page.getInteger(at: 22, endianness: .little, as: UInt32.self))
            let new = UInt32.random(in: 0...UInt32.max, using: &generator)
            page.setInteger(new, at: 18, endianness: .little)
            page.setInteger(UInt32(0), at: 22, endianness: .little)
            #expect(OggCRC.renumbered(stored, from: old, to: new, shift: shift) == OggCRC.checksum(page.readableBytesView), "\(size) bytes, \(old) → \(new)")
        }
    }
}
