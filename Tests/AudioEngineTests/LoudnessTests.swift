import EngineAPI
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct LoudnessTests {
    /// BS.1770's calibration: a 1 kHz sine at −20 dBFS in both channels reads −20 LUFS; pink noise
    /// (energy down to the K-weighting's high-pass) reads what ffmpeg's ebur128 reads.
    @Test func theMeterReadsWhatBS1770AndFFmpegRead() throws {
        var sine = [Float](repeating: 0, count: 2 * 48_000 * 3)
        for i in 0..<(sine.count / 2) {
            let x = Float(0.1 * sin(2 * Double.pi * 1_000 * Double(i) / 48_000))
            sine[2 * i] = x
            sine[2 * i + 1] = x
        }
        #expect(abs((try #require(Self.meter(sine))) - (-20)) < 0.1)

        let directory = try TemporaryDirectory()
        let file = try MediaFixture.noise(atLUFS: -23, seconds: 5, into: directory.path, name: "pink.flac")
        let noise = try MediaFixture.decodeStereo(file)
        let ours = try #require(Self.meter(noise))
        let ffmpeg = try LoudnessMeasurement.measure(file).integrated
        #expect(abs(ours - ffmpeg) < 0.2, "ours \(ours), ffmpeg \(ffmpeg)")
    }

    /// Issue 17: tracks mastered 20 dB apart (and a loud one) play at the target ±1 LU, as ffmpeg
    /// measures what comes out of the encoder; nothing clips (the limiter holds −1 dBTP before the
    /// encoder, whose own overshoot on this noise is about 0.6 dB).
    @Test(arguments: [-34.0, -14.0, -6.0])
    func aTrackPlaysAtTheTargetLoudness(mastered: Double) throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.noise(atLUFS: mastered, seconds: 10, into: directory.path, name: "track.flac")
        #expect(abs(try LoudnessMeasurement.measure(file).integrated - mastered) < 0.5)
        let played = try LoudnessMeasurement.measure(stereo: try Self.play(file, normalize: true))
        #expect(abs(played.integrated - (-14)) <= 1, "a track at \(mastered) LUFS played at \(played.integrated)")
        #expect(played.truePeak < 0, "true peak \(played.truePeak) dBTP")
        let untouched = try LoudnessMeasurement.measure(stereo: try Self.play(file, normalize: false))
        #expect(abs(untouched.integrated - mastered) <= 0.5, "without normalisation: \(untouched.integrated)")
    }

    /// A track's ReplayGain tag gives the gain from the first frame, without measuring: this one
    /// claims to be at −12 LUFS (it is at −20), so it plays 2 dB down, at −22, from the start.
    @Test func aReplayGainTagSetsTheGainFromTheFirstFrame() throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.noise(
            atLUFS: -20, seconds: 4, into: directory.path, name: "tagged.flac", tags: ["REPLAYGAIN_TRACK_GAIN=-6.00 dB"])
        let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
        #expect(pipeline.info?.taggedLoudness == -12)
        let played = try LoudnessMeasurement.measure(stereo: try Self.play(file, normalize: true))
        #expect(abs(played.integrated - (-22)) < 0.3, "played at \(played.integrated)")
        // The first half second already at that gain (a measurement would start at 0 dB).
        let start = try LoudnessMeasurement.measure(stereo: Array(try Self.play(file, normalize: true).prefix(2 * 24_000 * 2)))
        #expect(abs(start.integrated - (-22)) < 1, "first 0.5 s at \(start.integrated)")
    }

    /// A loud track is lowered as soon as its first 100 ms are measured, not glided down: a 1 kHz
    /// tone at −6 LUFS is at the target from its 10th frame (200 ms).
    @Test func aLoudTrackIsLoweredOnceItsFirst100msAreMeasured() throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.tone(1_000, seconds: 3, into: directory.path, name: "loud.wav", sampleRate: 48_000, volume: 0.5)
        let left = Spectrum.left(try Self.play(file, normalize: true))
        func level(_ frame: Int) -> Double { Spectrum.dBFS(Array(left[(frame * 960)..<((frame + 1) * 960)])) }
        #expect(level(2) - level(100) > 7, "the first frames are the source's: \(level(2)) then \(level(100))")
        for frame in 10..<20 {
            #expect(abs(level(frame) - level(100)) < 0.5, "frame \(frame): \(level(frame)), later \(level(100))")
        }
    }

    /// No pumping: music that swells and fades by 12 dB every 4 s keeps its swells once the gain
    /// has settled — the normaliser follows the track's loudness, not its dynamics.
    @Test func theMusicsOwnDynamicsAreKept() throws {
        let directory = try TemporaryDirectory()
        let steady = try MediaFixture.noise(atLUFS: -30, seconds: 24, into: directory.path, name: "steady.flac")
        let swelling = directory.file("swelling.flac")
        // Between −6 and +6 dB around the steady level, a full cycle every 4 s.
        try MediaFixture.ffmpeg(["-i", steady, "-af", "volume='pow(10, 0.3*sin(2*PI*t/4))':eval=frame", swelling])
        func swings(_ stereo: [Float], from second: Int) -> [Double] {
            // Loudest minus quietest 400 ms block level within each 4 s cycle.
            let left = Spectrum.left(stereo)
            return stride(from: second, to: left.count / 48_000 - 3, by: 4).map { start in
                let levels = (0..<10).map { block in
                    let at = (start * 48_000) + block * 19_200
                    return Spectrum.dBFS(Array(left[at..<(at + 19_200)]))
                }
                return (levels.max() ?? 0) - (levels.min() ?? 0)
            }
        }
        let source = swings(try MediaFixture.decodeStereo(swelling), from: 8)
        // Brought to −23 LUFS, so that the swells stay clear of the limiter (this is about the gain).
        let played = swings(try Self.play(swelling, normalize: true, target: -23), from: 8)
        #expect(played.count == source.count && source.count >= 3)
        for (heard, mastered) in zip(played, source) {
            #expect(abs(heard - mastered) < 1.5, "a swing of \(mastered) dB in the source is \(heard) dB as played")
        }
    }

    /// An Opus source whose R128 tag puts it at the target needs nothing: it stays passthrough
    /// (byte-identical packets) with normalisation on; one tagged 6 dB away is decoded.
    @Test func anOpusSourceTaggedAtTheTargetStaysPassthrough() throws {
        let directory = try TemporaryDirectory()
        for (gain, passthrough) in [(-2304, true), (-3840, false)] {
            let file = directory.file("tagged\(gain).opus")
            try MediaFixture.ffmpeg([
                "-f", "lavfi", "-i", "sine=f=440:d=1:sample_rate=48000", "-ac", "2", "-c:a", "libopus", "-b:a", "96k",
                "-frame_duration", "20", "-metadata", "R128_TRACK_GAIN=\(gain)", file,
            ])
            let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
            #expect(pipeline.info?.taggedLoudness == -23 - Double(gain) / 256)
            for _ in 0..<10 { _ = try pipeline.nextPacket(volume: 100, normalize: true) }
            #expect(pipeline.passthrough == passthrough, "R128_TRACK_GAIN=\(gain)")
        }
    }

    /// A track measured to its end is not measured again: its next play knows the gain from the
    /// first frame, as from a tag, and a track stopped after a few seconds is not kept.
    @Test func aTrackMeasuredOnceIsKnownOnItsNextPlay() throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.noise(atLUFS: -20, seconds: 4, into: directory.path, name: "measured.flac")
        let render = RenderContext(complexity: 10)
        let first = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: .init(), render: render)
        #expect(first.knownLoudness == nil)
        while case .value = try first.nextPacket(volume: 100, normalize: true) {}
        let remembered = try #require(render.loudness.loudness(for: file))
        #expect(abs(remembered - (-20)) < 0.3, "measured \(remembered)")

        let again = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: .init(), render: render)
        #expect(again.knownLoudness == remembered)
        _ = try again.nextPacket(volume: 100, normalize: true)
        #expect(again.renderer.measuredLoudness == nil, "the meter runs again")

        // Stopped after a second: too little to keep.
        let other = try MediaFixture.noise(atLUFS: -30, seconds: 4, into: directory.path, name: "stopped.flac")
        do {
            let stopped = try Pipeline(source: ResolvedSource(location: other, displayName: "t"), encoder: .init(), render: render)
            for _ in 0..<50 { _ = try stopped.nextPacket(volume: 100, normalize: true) }
        }
        #expect(render.loudness.loudness(for: other) == nil)
    }

    /// An Opus source measured once within 0.5 LU of the target stays passed through on its next
    /// play, with normalisation on; the first play had to decode it to measure it.
    @Test func anOpusSourceMeasuredAtTheTargetIsPassedThroughNextTime() throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("measured.opus")
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "sine=f=440:d=4:sample_rate=48000", "-ac", "2", "-c:a", "libopus", "-b:a", "96k",
            "-frame_duration", "20", file,
        ])
        let render = RenderContext(complexity: 10)
        let first = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: .init(), render: render)
        for _ in 0..<10 { _ = try first.nextPacket(volume: 100, normalize: true) }
        #expect(!first.passthrough)
        while case .value = try first.nextPacket(volume: 100, normalize: true) {}
        let measured = try #require(render.loudness.loudness(for: file))
        let again = try Pipeline(
            source: ResolvedSource(location: file, displayName: "t"), encoder: .init(), loudnessTarget: measured + 0.3, render: render)
        for _ in 0..<10 { _ = try again.nextPacket(volume: 100, normalize: true) }
        #expect(again.passthrough, "measured at \(measured) LUFS, the target 0.3 LU above")
    }

    @Test func tagsAreReadOnlyWhenTheyArePlainNumbers() {
        func loudness(_ tags: [String: String]) -> Double? { MediaDemuxer.taggedLoudness { tags[$0] } }
        #expect(loudness(["R128_TRACK_GAIN": "-2304"]) == -14)
        #expect(loudness(["REPLAYGAIN_TRACK_GAIN": "+4.00 dB"]) == -22)
        #expect(loudness(["REPLAYGAIN_TRACK_GAIN": "-3.5dB"]) == -14.5)
        #expect(loudness(["REPLAYGAIN_TRACK_GAIN": "nan dB"]) == nil)
        #expect(loudness(["REPLAYGAIN_TRACK_GAIN": "1e308 dB"]) == nil)
        #expect(loudness(["R128_TRACK_GAIN": "99999999999999999999"]) == nil)
        // Int.min: abs() of it traps, which would take the engine and every session down.
        #expect(loudness(["R128_TRACK_GAIN": "-9223372036854775808"]) == nil)
        #expect(loudness(["R128_TRACK_GAIN": "15361"]) == nil)
        #expect(loudness(["REPLAYGAIN_TRACK_GAIN": "loud"]) == nil)
        #expect(loudness([:]) == nil)
    }

    /// The limiter holds a sine driven 6 dB over full scale at −1 dBTP without clipping it into
    /// harmonics, delaying it by its 1 ms look-ahead.
    @Test func theLimiterKeepsPeaksUnderTheCeilingWithoutClipping() {
        var limiter = PeakLimiter()
        var out: [Float] = []
        for frame in 0..<50 {
            var samples = [Float](repeating: 0, count: 1_920)
            for i in 0..<960 {
                let x = Float(2 * sin(2 * Double.pi * 1_000 * Double(frame * 960 + i) / 48_000))
                samples[2 * i] = x
                samples[2 * i + 1] = x
            }
            samples.withUnsafeMutableBufferPointer { limiter.process($0) }
            out += samples
        }
        let left = Spectrum.left(out)
        #expect((left.map(abs).max() ?? 9) <= PeakLimiter.ceiling + 1e-4)
        let steady = Array(left[24_000..<48_000])
        #expect(abs(Spectrum.dBFS(steady) - (20 * log10(Double(PeakLimiter.ceiling)) - 3.01)) < 0.5, "steady level \(Spectrum.dBFS(steady))")
        #expect(Spectrum.level(at: 3_000, steady) < Spectrum.level(at: 1_000, steady) - 40, "harmonics from clipping")
        #expect(left[0..<PeakLimiter.lookahead].allSatisfy { $0 == 0 })
    }

    /// The limiter's shortcut — a frame whose peaks cannot need limiting is only delayed — gives
    /// what the sample loop gives, sample for sample: quiet stretches, peaks over the ceiling, a
    /// frame whose only loud sample is the last of the one before (kept in the true-peak
    /// history), and the release after limiting.
    @Test(arguments: 0..<8)
    func theLimitersShortcutGivesWhatTheSampleLoopGives(seed: UInt64) {
        var fast = PeakLimiter(), slow = PeakLimiter(shortcut: false)
        var state = seed &* 6_364_136_223_846_793_005 &+ 1
        func random(_ count: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(count))
        }
        var level: Float = 0.1
        for frame in 0..<400 {
            var samples = [Float](repeating: 0, count: 1_920)
            if random(3) == 0 { level = [0.1, 0.5, 0.7, 1.4, 0.3][random(5)] }
            for i in 0..<960 {
                let x = level * Float(sin(2 * Double.pi * 440 * Double(frame * 960 + i) / 48_000))
                samples[2 * i] = x
                samples[2 * i + 1] = -0.8 * x
            }
            if random(7) == 0 { samples[1_918] = 1.2 }  // only the history can tell the next frame
            var other = samples
            samples.withUnsafeMutableBufferPointer { fast.process($0) }
            other.withUnsafeMutableBufferPointer { slow.process($0) }
            if let index = samples.indices.first(where: { samples[$0] != other[$0] }) {
                Issue.record("frame \(frame), sample \(index): \(samples[index]) against \(other[index]) (level \(level))")
                return
            }
        }
    }

    /// Turned off mid-track, the source's own level is back from the next frame (a one-frame ramp,
    /// as a volume change); turned on again, the track is raised again within half a second; and
    /// neither switch clicks: the limiter's 1 ms delay is crossfaded out and in, not cut (cut, it
    /// would jump a 440 Hz tone by 0.44 of a cycle, or break it with 1 ms of silence).
    @Test func turningItOffAndOnIsHeardAtOnceWithoutAClick() throws {
        let directory = try TemporaryDirectory()
        // A steady 440 Hz sine at −34 LUFS, so that each frame's level is the gain's.
        let file = try MediaFixture.tone(440, seconds: 8, into: directory.path, name: "quiet.wav", sampleRate: 48_000, volume: 0.02)
        let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
        let decoder = try OpusDecoder()
        var left: [Float] = []
        var frame = 0
        while case .value(let packet) = try pipeline.nextPacket(volume: 100, normalize: frame < 150 || frame >= 251) {
            left += Spectrum.left(try decoder.decode(packet))
            frame += 1
        }
        func level(_ frame: Int) -> Double { Spectrum.dBFS(Array(left[(frame * 960)..<((frame + 1) * 960)])) }
        #expect(level(140) - level(200) > 17, "raised: \(level(140)), then off: \(level(200))")
        #expect(abs(level(152) - level(200)) < 1, "two frames after turning it off: \(level(152)), later \(level(200))")
        #expect(level(370) - level(200) > 17, "on again: \(level(370))")
        // A click is a jump between two samples far beyond what the sine itself moves.
        // Both delay switches happen at the source's own level (off: in the frame after the gain's
        // ramp; on: before the new measurement raises it), so that level's steady tone is the
        // reference. Decoded Opus lags what was encoded by 312 samples (6.5 ms).
        func steepest(_ samples: Range<Int>) -> Float {
            let part = left[samples]
            return zip(part.dropFirst(), part).map { abs($0 - $1) }.max() ?? 0
        }
        let steady = steepest((200 * 960)..<(208 * 960))
        let off = steepest((151 * 960 + 312)..<(156 * 960)), on = steepest((249 * 960)..<(255 * 960))
        #expect(off <= steady * 1.5, "off: \(off) against \(steady)")
        #expect(on <= steady * 1.5, "on: \(on) against \(steady)")
    }

    @Test func theTargetIsConfiguredInLUFS() throws {
        #expect(try EngineConfiguration(environment: [:]).playback.loudnessTarget == -14)
        #expect(try EngineConfiguration(environment: ["TONEARM_LOUDNESS_TARGET": "-16.5"]).playback.loudnessTarget == -16.5)
        for wrong in ["-3", "-41", "loud", "nan"] {
            #expect(throws: ConfigurationError.self) { try EngineConfiguration(environment: ["TONEARM_LOUDNESS_TARGET": wrong]) }
        }
    }

    static func meter(_ stereo: [Float]) -> Double? {
        var meter = LoudnessMeter()
        var copy = stereo
        copy.withUnsafeMutableBufferPointer { meter.add($0) }
        return meter.loudness
    }

    /// Plays a file through the pipeline and decodes the Opus that comes out.
    static func play(_ file: String, normalize: Bool, target: Double = LoudnessNormalizer.defaultTarget) throws -> [Float] {
        let pipeline = try Pipeline(
            source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration(), loudnessTarget: target)
        let decoder = try OpusDecoder()
        var pcm: [Float] = []
        while case .value(let packet) = try pipeline.nextPacket(volume: 100, normalize: normalize) {
            pcm += try decoder.decode(packet)
        }
        return pcm
    }
}
