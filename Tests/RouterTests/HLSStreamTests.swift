import Foundation
import NIOCore
import Testing

@testable import TonearmRouter

/// The HLS segmenter as a value: 2 s segments of 100 packets, the last six kept, track starts as
/// date ranges at their packet, a pause as a discontinuity, a long silence as the playlist's end.
struct HLSStreamTests {
    func packet(_ byte: UInt8) -> ByteBuffer { ByteBuffer(bytes: [0xFC, byte, byte]) }

    /// The playlist's dates, computed without a formatter, are what ISO 8601 says they are:
    /// across leap days, centuries, the epoch and before it.
    @Test func datesAreISO8601WithMilliseconds() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let moments: [Int64] = [
            0, 1, 999, -1, -86_400_001, 951_782_400_000, 951_868_799_999, 4_107_542_400_000, 1_795_712_413_769,
            253_402_300_799_999,
        ] + (0..<200).map { Int64($0) * 7_919_999_917 - 500_000_000_000 }
        for ms in moments {
            let expected = formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
            #expect(HLSStream.date(ms) == expected, "\(ms)")
        }
    }

    /// A playlist asked again without a change is the same text; a cut segment changes it.
    @Test func theRevisionCountsEveryChangeToThePlaylist() {
        var stream = HLSStream()
        for index in 0..<100 { stream.append(packet(0), nowMS: Int64(index) * 20) }
        let first = stream.revision
        for index in 100..<150 { stream.append(packet(0), nowMS: Int64(index) * 20) }
        #expect(stream.revision == first, "half a segment changes no playlist")
        for index in 150..<200 { stream.append(packet(0), nowMS: Int64(index) * 20) }
        #expect(stream.revision != first)
        let cut = stream.revision
        stream.end()
        #expect(stream.revision != cut)
        let ended = stream.revision
        stream.append(packet(0), nowMS: 10_000)
        #expect(stream.revision != ended, "playing again takes the end away")
    }

    @Test func segmentsDateRangesGapsAndTheEnd() {
        var stream = HLSStream()
        stream.trackStarted(title: "First \"one\"", artist: "Someone")
        for index in 0..<250 { stream.append(packet(UInt8(index % 256)), nowMS: 1_000_000 + Int64(index) * 20) }
        #expect(stream.segments.map(\.sequence) == [1, 2] && stream.segments.allSatisfy { $0.packets == 100 })
        // The second track starts at the 260th packet: 5.2 s into the stream, in segment 3.
        for index in 250..<260 { stream.append(packet(0), nowMS: 1_000_000 + Int64(index) * 20) }
        stream.trackStarted(title: "Second", artist: nil)
        for index in 260..<300 { stream.append(packet(0), nowMS: 1_000_000 + Int64(index) * 20) }
        let playlist = stream.playlist(query: "token=abc")
        let lines = playlist.split(separator: "\n").map(String.init)
        #expect(lines.prefix(6) == [
            "#EXTM3U", "#EXT-X-VERSION:7", "#EXT-X-TARGETDURATION:2", "#EXT-X-MEDIA-SEQUENCE:1",
            "#EXT-X-DISCONTINUITY-SEQUENCE:0", #"#EXT-X-MAP:URI="init.mp4?token=abc""#,
        ])
        #expect(lines.contains("1.m4s?token=abc") && lines.contains("3.m4s?token=abc") && lines.filter { $0 == "#EXTINF:2.000," }.count == 3)
        let ranges = lines.filter { $0.hasPrefix("#EXT-X-DATERANGE") }
        #expect(ranges.count == 2, "\(ranges)")
        #expect(ranges.first?.contains(#"X-TITLE="First 'one'""#) == true && ranges.first?.contains(#"X-ARTIST="Someone""#) == true)
        #expect(ranges.last?.contains("START-DATE=\"1970-01-01T00:16:45.200Z\"") == true, "\(ranges)")
        // Each date range sits in the segment it falls in: the second after segment 3's date.
        let third = lines.firstIndex { $0.hasPrefix("#EXT-X-PROGRAM-DATE-TIME:1970-01-01T00:16:44") } ?? -1
        let second = lines.firstIndex { $0.contains("Second") } ?? -1
        #expect(third >= 0 && second > third)

        // A pause cuts the segment short; what follows it is after a discontinuity.
        for index in 300..<330 { stream.append(packet(0), nowMS: 1_000_000 + Int64(index) * 20) }
        stream.gap()
        #expect(stream.segments.last?.packets == 30)
        stream.append(packet(0), nowMS: 1_100_000)
        for _ in 1..<100 { stream.append(packet(0), nowMS: 1_100_000) }
        #expect(stream.playlist().contains("#EXTINF:0.600,\n4.m4s\n#EXT-X-DISCONTINUITY\n"))
        // Six are kept: the oldest go, and the playlist starts later.
        for _ in 0..<400 { stream.append(packet(0), nowMS: 1_200_000) }
        #expect(stream.segments.count == HLSStream.kept && stream.segments.first?.sequence == 4)
        #expect(stream.playlist().contains("#EXT-X-MEDIA-SEQUENCE:4") && stream.segment(1) == nil && stream.segment(9) != nil)
        // Silence: the playlist ends; a packet after that starts it again, after a discontinuity.
        stream.end()
        #expect(stream.playlist().hasSuffix("#EXT-X-ENDLIST\n"))
        stream.append(packet(0), nowMS: 1_300_000)
        #expect(!stream.playlist().contains("ENDLIST"))
    }

    /// RFC 8216 §6.2.2: a server that removes an `EXT-X-DISCONTINUITY` from the playlist MUST
    /// increment `EXT-X-DISCONTINUITY-SEQUENCE`, so that a player joining later numbers the
    /// discontinuities as one that stayed did.
    @Test func theDiscontinuitySequenceCountsTheGapsThatLeftThePlaylist() {
        var stream = HLSStream()
        var now: Int64 = 1_000_000
        func play(_ packets: Int) {
            for _ in 0..<packets {
                stream.append(packet(0), nowMS: now)
                now += 20
            }
        }
        func tags() -> (sequence: String?, discontinuities: Int) {
            let lines = stream.playlist().split(separator: "\n")
            return (lines.first { $0.hasPrefix("#EXT-X-DISCONTINUITY-SEQUENCE:") }.map { String($0.dropFirst(30)) },
                    lines.filter { $0 == "#EXT-X-DISCONTINUITY" }.count)
        }
        play(100)  // segment 1
        for _ in 0..<2 {  // segments 2 and 3, each after a pause
            stream.gap()
            now += 5_000
            play(100)
        }
        #expect(tags().sequence == "0" && tags().discontinuities == 2)
        play(400)  // segments 4–7: segment 1 leaves, which followed no gap
        #expect(stream.segments.first?.sequence == 2 && tags().sequence == "0" && tags().discontinuities == 2)
        play(100)  // segment 2 leaves with its discontinuity
        #expect(tags().sequence == "1" && tags().discontinuities == 1)
        play(100)
        #expect(tags().sequence == "2" && tags().discontinuities == 0)
        play(600)
        #expect(tags().sequence == "2", "segments without a gap leave the count alone")
    }

    /// The initialisation segment is an `ftyp` then a `moov` whose sample entry is `Opus` with a
    /// `dOps`; a media segment's `trun` points at its `mdat`'s first byte.
    @Test func theBoxesAreWhereAReaderLooks() throws {
        let initial = FragmentedOpus.initialization()
        let bytes = Array(initial.readableBytesView)
        #expect(String(decoding: bytes[4..<8], as: UTF8.self) == "ftyp")
        let names = text(of: bytes)
        for box in ["moov", "mvhd", "trak", "tkhd", "mdia", "mdhd", "hdlr", "soun", "minf", "smhd", "stsd", "Opus", "dOps", "mvex", "trex"] {
            #expect(names.contains(box), "no \(box)")
        }
        let packets = [ByteBuffer(bytes: [1, 2, 3]), ByteBuffer(bytes: [4, 5])]
        let segment = FragmentedOpus.segment(packets, sequence: 7, decodeTime: 96_000)
        let data = Array(segment.readableBytesView)
        let moofSize = Int(UInt32(data[0]) << 24 | UInt32(data[1]) << 16 | UInt32(data[2]) << 8 | UInt32(data[3]))
        #expect(String(decoding: data[4..<8], as: UTF8.self) == "moof")
        #expect(String(decoding: data[(moofSize + 4)..<(moofSize + 8)], as: UTF8.self) == "mdat")
        #expect(Array(data[(moofSize + 8)...]) == [1, 2, 3, 4, 5])
        let trun = try #require(text(of: data).range(of: "trun"))
        let at = text(of: data).distance(from: text(of: data).startIndex, to: trun.lowerBound) + 4 + 4 + 4
        let offset = Int(UInt32(data[at]) << 24 | UInt32(data[at + 1]) << 16 | UInt32(data[at + 2]) << 8 | UInt32(data[at + 3]))
        #expect(offset == moofSize + 8)
    }

    private func text(of data: [UInt8]) -> String {
        String(decoding: data.map { (32...126).contains($0) ? $0 : 46 }, as: UTF8.self)
    }
}
