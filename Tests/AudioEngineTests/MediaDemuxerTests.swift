import Foundation
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct MediaDemuxerTests {
    /// A session's memory does not grow with how long it plays: FFmpeg's seek index, which gains
    /// an entry for every audio packet of a WebM file (1.2 KB a second, up to 1 MiB by default),
    /// stays within `MediaDemuxer.maxIndexBytes` to the end of a track 7 times as long as that holds, and a seek near
    /// the end after that still starts on the asked-for packet and sample.
    // One at a time: each blocks a thread of the test pool for seconds, and two would hold both
    // on a 2-core machine, starving the tests that wait on timers.
    @Test(.serialized, arguments: ["long.webm", "long.mp3"])
    func theSeekIndexStaysBoundedThroughALongTrackAndSeeksStayExact(name: String) throws {
        let directory = try TemporaryDirectory()
        let file = directory.file(name)
        // 100 s (5,000 packets; the bound holds about 680 entries); 440 Hz, then 880 Hz for the last 10 s.
        let wave = "0.5*sin(2*PI*(440+440*gte(t\\,90))*t)"
        var arguments = ["-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=100"]
        arguments += name.hasSuffix(".webm") ? ["-c:a", "libopus", "-b:a", "32k", "-compression_level", "0"] : ["-b:a", "64k"]
        try MediaFixture.ffmpeg(arguments + [file])

        let demuxer = try MediaDemuxer(path: file)
        let decoder = try MediaDecoder(info: demuxer.info, stream: demuxer.stream, source: demuxer)
        var packets = 0
        while case .value = try decoder.readPacket() { packets += 1 }
        // 20 ms Opus or 24 ms MP3 packets: 4,100 or more.
        #expect(packets > 4_000, "\(packets) packets")
        let entryBytes = 24  // sizeof(AVIndexEntry)
        #expect(demuxer.indexEntries * entryBytes <= Int(MediaDemuxer.maxIndexBytes), "\(demuxer.indexEntries) index entries")

        try decoder.seek(toMS: 95_000)
        var frame: [Float] = []
        var pcm: [Float] = []
        for _ in 0..<25 {
            guard case .value = try decoder.readFrame(into: &frame) else { break }
            pcm += frame
        }
        #expect(pcm.count == 25 * 1_920)
        #expect(abs(Spectrum.dominantFrequency(Spectrum.left(pcm)) - 880) < 5)
        // Packets: the ones before the target are the caller's to skip; the reduced index puts
        // the seek at most a few seconds before it.
        try decoder.seek(toMS: 85_500)
        var skipped = 0
        var first: Int64?
        while case .value(let packet) = try decoder.readPacket() {
            if let position = packet.positionMS, position >= 85_500 {
                first = position
                break
            }
            skipped += 1
        }
        #expect(first.map { $0 < 85_530 } == true, "first packet at \(first ?? -1) ms")
        #expect(skipped < 500, "\(skipped) packets read before the target")
    }
}
