import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct PipelineTests {
    @Test(arguments: [(440, 44_100), (1_000, 48_000), (300, 22_050)])
    func decodesResamplesAndEncodesAToneFaithfully(frequency: Int, sampleRate: Int) throws {
        let directory = try TemporaryDirectory()
        let path = try MediaFixture.tone(frequency, seconds: 2, into: directory.path, sampleRate: sampleRate)
        let pipeline = try Pipeline(
            source: ResolvedSource(location: path, displayName: "t"), encoder: OpusEncoderConfiguration())
        let duration = try #require(pipeline.info?.durationMS)
        #expect(abs(duration - 2_000) < 100, "duration \(duration) ms")
        let decoder = try OpusDecoder()
        var pcm: [Float] = []
        var packets = 0
        while case .value(let packet) = try pipeline.nextPacket(volume: 100) {
            #expect(packet.count > 10 && packet.count < 1_500)
            pcm += try decoder.decode(packet)
            packets += 1
        }
        // 2 s is 100 frames of 20 ms (the last one padded; mp3 adds a little priming).
        #expect((100...103).contains(packets))
        let left = Spectrum.left(pcm)
        let middle = Array(left[24_000..<72_000])
        #expect(abs(Spectrum.dominantFrequency(middle) - Double(frequency)) < 5)
        // The fixture is a sine at half scale: about -9 dBFS.
        #expect(abs(Spectrum.dBFS(middle) - (-9.03)) < 1)
    }

    /// FFmpeg's decoder is opened lazily for a 48 kHz stereo Opus source (passthrough never needs
    /// it): reading frames opens it, and a seek made before that still lands where it was asked.
    @Test func anOpusSourceDecodesOnDemandAndSeeksBeforeItsDecoderExists() throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("steps.webm")
        // 440 Hz for the first 2 s, then 880 Hz.
        let wave = "0.5*sin(2*PI*(440+440*gte(t\\,2))*t)"
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=4", "-c:a", "libopus", "-b:a", "128k", file,
        ])
        func dominant(_ decoder: MediaDecoder, frames: Int) throws -> Double {
            var frame: [Float] = []
            var pcm: [Float] = []
            for _ in 0..<frames {
                guard case .value = try decoder.readFrame(into: &frame) else { break }
                pcm += frame
            }
            return Spectrum.dominantFrequency(Array(Spectrum.left(pcm).dropFirst(960)))
        }
        let fromStart = try MediaDecoder(path: file)
        #expect(fromStart.info.isOpusStereo48k)
        #expect(abs(try dominant(fromStart, frames: 25) - 440) < 5)
        let sought = try MediaDecoder(path: file)
        try sought.seek(toMS: 2_500)
        #expect(abs(try dominant(sought, frames: 25) - 880) < 5)
    }

    /// A seek made mid-play resumes exactly as a fresh decoder's seek does: nothing from before
    /// the seek is left in the resampler's delay line (without the reset the first frames differ
    /// by about half of full scale).
    @Test func aSeekMidPlayLeavesNothingOfTheOldPositionInTheResampler() throws {
        let directory = try TemporaryDirectory()
        // 44.1 kHz, so the resampler holds a delay line.
        let file = try MediaFixture.tone(440, seconds: 4, into: directory.path, sampleRate: 44_100)
        func threeFrames(_ decoder: MediaDecoder) throws -> [Float] {
            var frame: [Float] = [], pcm: [Float] = []
            for _ in 0..<3 { if case .value = try decoder.readFrame(into: &frame) { pcm += frame } }
            return pcm
        }
        let playing = try MediaDecoder(path: file)
        for _ in 0..<50 { _ = try threeFrames(playing) }
        try playing.seek(toMS: 2_500)
        let fresh = try MediaDecoder(path: file)
        try fresh.seek(toMS: 2_500)
        let (a, b) = (try threeFrames(playing), try threeFrames(fresh))
        #expect(a.count == b.count && !a.isEmpty)
        let difference = zip(a, b).map { abs($0 - $1) }.max() ?? 1
        #expect(difference < 1e-6, "the frames after a mid-play seek differ by \(difference)")
    }

    /// A seek is heard from its first frame: the decoder starts a little before the target and
    /// drops what comes before it, so codecs that build on earlier frames (MP3's bit reservoir,
    /// AAC's overlap) have them. Started on the target, the first MP3 frame after a seek came
    /// out partly silent, and a listener heard a gap.
    @Test(arguments: ["mp3", "m4a", "ogg"])
    func aSeekIsHeardFromItsFirstFrame(format: String) throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("tone.\(format)")
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100:duration=6", "-ac", "2", file])
        // The tone's level, read straight through from the start.
        let straight = try MediaDecoder(path: file)
        var frame: [Float] = []
        for _ in 0..<100 { _ = try straight.readFrame(into: &frame) }
        let level = Spectrum.dBFS(Spectrum.left(frame))
        for target in [1_000, 2_500, 4_020] {
            let decoder = try MediaDecoder(path: file)
            try decoder.seek(toMS: Int64(target))
            guard case .value = try decoder.readFrame(into: &frame) else {
                Issue.record("no frame after a seek to \(target) ms")
                continue
            }
            let left = Spectrum.left(frame)
            for half in [Array(left[0..<480]), Array(left[480..<960])] {
                #expect(abs(Spectrum.dBFS(half) - level) < 0.5, "\(format) at \(target) ms: \(Spectrum.dBFS(half)) dBFS, not \(level)")
            }
        }
    }

    /// A stream whose channel count and sample rate change part-way (two AC-3 streams back to
    /// back, as a radio stream switching programmes sends): the resampler follows the frames
    /// instead of reading channels the frame does not have (found by the media fuzzer: a SEGV).
    @Test func aStreamWhoseChannelsAndRateChangeMidwayKeepsPlaying() throws {
        let directory = try TemporaryDirectory()
        let first = directory.file("a.ac3"), second = directory.file("b.ac3"), joined = directory.file("joined.ac3")
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=32000:duration=2", "-ac", "1", first])
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "sine=frequency=880:sample_rate=48000:duration=2", "-ac", "6", "-ar", "48000", second,
        ])
        try FileManager.default.createFile(
            atPath: joined, contents: Data(contentsOf: URL(fileURLWithPath: first)) + Data(contentsOf: URL(fileURLWithPath: second)))
        let pipeline = try Pipeline(
            source: ResolvedSource(location: joined, displayName: "j"), encoder: OpusEncoderConfiguration())
        let decoder = try OpusDecoder()
        var pcm: [Float] = []
        while case .value(let packet) = try pipeline.nextPacket(volume: 100) { pcm += try decoder.decode(packet) }
        let left = Spectrum.left(pcm)
        // About 4 s in all; the middle of each half carries its own tone.
        #expect(left.count > 180_000 && left.count < 200_000, "\(left.count) samples")
        #expect(abs(Spectrum.dominantFrequency(Array(left[24_000..<72_000])) - 440) < 5)
        #expect(abs(Spectrum.dominantFrequency(Array(left[120_000..<168_000])) - 880) < 5)
    }

    @Test func aFileWithoutAudioIsAClearError() throws {
        let directory = try TemporaryDirectory()
        let path = directory.file("text.mp3")
        try "not audio at all".write(toFile: path, atomically: true, encoding: .utf8)
        #expect { try Pipeline(source: ResolvedSource(location: path, displayName: "x"), encoder: .init()) } throws: {
            ($0 as? APIError)?.status == .unprocessableContent
        }
    }

    /// What leaves the engine with an equalizer band boosted: decoded, the band is louder by the
    /// gain's amount (±1.5 dB after Opus) and a distant band is as it was; set mid-play, it is
    /// heard from the next frame; an Opus source is passthrough until a filter is set.
    @Test func anEqualizerBoostIsHeardInTheEncodedOpus() throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("two-tones.wav")
        let wave = "0.25*sin(2*PI*100*t)+0.25*sin(2*PI*1000*t)"
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=3", file])
        func decoded(_ filtersFrom: Int?) throws -> [Float] {
            let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
            let decoder = try OpusDecoder()
            var pcm: [Float] = []
            var frame = 0
            let boost = Filters(equalizer: [EqualizerBand(band: 8, gain: 0.25)])
            while case .value(let packet) = try pipeline.nextPacket(
                volume: 100, filters: filtersFrom.map { frame >= $0 } == true ? boost : Filters())
            {
                pcm += try decoder.decode(packet)
                frame += 1
            }
            return Spectrum.left(pcm)
        }
        let plain = try decoded(nil), boosted = try decoded(0), changed = try decoded(75)
        let second = 48_000..<96_000
        let atBand = Spectrum.level(at: 1_000, Array(boosted[second])) - Spectrum.level(at: 1_000, Array(plain[second]))
        let farAway = Spectrum.level(at: 100, Array(boosted[second])) - Spectrum.level(at: 100, Array(plain[second]))
        #expect(abs(atBand - 6.02) < 1.5, "1 kHz: \(atBand) dB")
        #expect(abs(farAway) < 1, "100 Hz: \(farAway) dB")
        // Set at frame 75 (1.5 s): the first second is as plain, the last second as boosted.
        let before = Spectrum.level(at: 1_000, Array(changed[24_000..<72_000])) - Spectrum.level(at: 1_000, Array(plain[24_000..<72_000]))
        let after = Spectrum.level(at: 1_000, Array(changed[96_000..<144_000])) - Spectrum.level(at: 1_000, Array(plain[96_000..<144_000]))
        #expect(abs(before) < 0.5 && abs(after - 6.02) < 1.5, "before \(before) dB, after \(after) dB")

        let opus = directory.file("tone.webm")
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "sine=f=440:d=2", "-ac", "2", "-ar", "48000", "-c:a", "libopus", opus])
        let pipeline = try Pipeline(source: ResolvedSource(location: opus, displayName: "t"), encoder: OpusEncoderConfiguration())
        _ = try pipeline.nextPacket(volume: 100)
        #expect(pipeline.passthrough)
        _ = try pipeline.nextPacket(volume: 100, filters: Filters(equalizer: [EqualizerBand(band: 5, gain: 0.1)]))
        #expect(!pipeline.passthrough)
    }

    /// Tremolo as it leaves the engine: the decoded level falls by half (−6 dB) in the middle of
    /// each 250 ms cycle at 4 Hz and is whole at its ends.
    @Test func aTremoloIsHeardAtItsRateInTheEncodedOpus() throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("tone.wav")
        try MediaFixture.ffmpeg(["-f", "lavfi", "-i", "sine=f=1000:d=2:sample_rate=48000", "-ac", "2", file])
        let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
        let decoder = try OpusDecoder()
        var pcm: [Float] = []
        while case .value(let packet) = try pipeline.nextPacket(volume: 100, filters: Filters(tremolo: Tremolo(frequency: 4, depth: 0.5))) {
            pcm += try decoder.decode(packet)
        }
        let left = Spectrum.left(pcm)
        // 10 ms windows from 0.5 s (Opus's 6.5 ms of delay shifts each trough by under a window).
        let levels = stride(from: 24_000, to: 96_000 - 479, by: 480).map { Spectrum.dBFS(Array(left[$0..<($0 + 480)])) }
        for cycle in 0..<6 {
            let window = levels[(cycle * 25)..<(cycle * 25 + 25)]
            let quietest = window.indices.min { window[$0] < window[$1] } ?? -1
            #expect(abs(quietest - (cycle * 25 + 12)) <= 2, "cycle \(cycle): quietest at \(quietest * 10 + 500) ms")
            let swing = (window.max() ?? 0) - (window.min() ?? 0)
            #expect(abs(swing - 6.02) < 1, "cycle \(cycle): the level swings by \(swing) dB")
        }
    }
}
