import EngineAPI
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

/// The next track joined to the current one inside one pipeline chain: on the sample (gapless) or
/// mixed over a crossfade. What leaves is decoded and listened to.
@Suite struct JoinTests {
    /// Plays `first` with `second` following over `fadeMS`, through one renderer as the playback
    /// does, and returns the decoded output and the frames where the join started and completed.
    /// WAV tones of 440 Hz for `first` seconds, then 880 Hz for `second`.
    static func play(seconds first: Double, then second: Double, fadeMS: Int) throws -> (pcm: [Float], started: Int?, completed: Int?) {
        let directory = try TemporaryDirectory()
        return try play(
            try MediaFixture.tone(440, seconds: first, into: directory.path, name: "a.wav", sampleRate: 48_000),
            then: try MediaFixture.tone(880, seconds: second, into: directory.path, name: "b.wav", sampleRate: 48_000),
            fadeMS: fadeMS)
    }

    static func play(
        _ first: String, then second: String, fadeMS: Int
    ) throws -> (pcm: [Float], started: Int?, completed: Int?) {
        var pipeline = try Pipeline(source: ResolvedSource(location: first, displayName: "a"), encoder: OpusEncoderConfiguration())
        let next = try Pipeline(source: ResolvedSource(location: second, displayName: "b"), encoder: OpusEncoderConfiguration())
        pipeline.setFollowing(.init(playID: 2, pipeline: next, fadeFloats: 96 * fadeMS))
        let decoder = try OpusDecoder()
        var pcm: [Float] = []
        var started: Int?, completed: Int?
        var frame = 0
        while true {
            switch try pipeline.nextPacket(volume: 100, normalize: false) {
            case .value(let packet):
                pcm += try decoder.decode(packet)
                if pipeline.joinStarted { started = frame }
                if pipeline.joinCompleted {
                    completed = frame
                    pipeline = try #require(pipeline.handOver())
                }
                frame += 1
            case .end:
                if pipeline.following != nil, let joined = pipeline.handOver() {
                    pipeline = joined
                    continue
                }
                return (pcm, started, completed)
            case .pending:
                Issue.record("a file never waits")
                return (pcm, started, completed)
            }
        }
    }

    /// Two tones whose lengths are not whole frames (1.01 s = 50.5 frames, then 1 s): the second
    /// starts on the sample after the first's last one, in the same frame. Nothing in between is
    /// silent, and the output is exactly as long as the two.
    @Test func gaplessJoinsOnTheSample() throws {
        let (pcm, started, completed) = try Self.play(seconds: 1.01, then: 1, fadeMS: 0)
        let left = Spectrum.left(pcm)
        // 48,480 + 48,000 samples: 100.5 frames, the last one padded.
        #expect(left.count == 101 * 960, "\(left.count) samples")
        #expect(started == 50 && completed == 50, "joined in frame \(String(describing: started))")
        // libopus delays by 312 samples; from there to the second tone's end, no 2.5 ms is quiet.
        let delay = 312
        let end = delay + 48_480 + 48_000
        var quiet: [Int] = []
        for start in stride(from: delay + 120, to: end - 240, by: 120) {
            if Spectrum.rms(Array(left[start..<start + 120])) < 0.2 { quiet.append(start) }
        }
        #expect(quiet.isEmpty, "quiet windows at \(quiet.prefix(5)) (the join is at \(delay + 48_480))")
        // The tone changes at the join and nowhere else.
        let join = delay + 48_480
        #expect(abs(Spectrum.dominantFrequency(Array(left[join - 4_800..<join - 240])) - 440) < 10)
        #expect(abs(Spectrum.dominantFrequency(Array(left[join + 240..<join + 4_800])) - 880) < 10)
    }

    /// A 1 s crossfade between two 3 s tones: 5 s in all; in the fade's middle both tones are
    /// heard at equal level, and the sum is as loud as either tone alone (equal power).
    @Test func crossfadeMixesBothTonesAtEqualPower() throws {
        let (pcm, started, completed) = try Self.play(seconds: 3, then: 3, fadeMS: 1_000)
        let left = Spectrum.left(pcm)
        #expect(left.count == 250 * 960, "\(left.count / 960) frames")
        #expect(started == 100 && completed == 149, "fade from frame \(String(describing: started)) to \(String(describing: completed))")
        func window(_ seconds: Double) -> [Float] {
            let start = 312 + Int(seconds * 48_000)
            return Array(left[start..<start + 4_800])
        }
        let alone = Spectrum.dBFS(window(1))
        let middle = window(2.45)
        let at440 = Spectrum.level(at: 440, middle), at880 = Spectrum.level(at: 880, middle)
        #expect(abs(at440 - at880) < 1.5, "440 Hz at \(at440) dB, 880 Hz at \(at880) dB mid-fade")
        #expect(abs(Spectrum.dBFS(middle) - alone) < 1, "mid-fade \(Spectrum.dBFS(middle)) dBFS, a tone alone \(alone)")
        // Before the fade only the first tone, after it only the second.
        #expect(Spectrum.level(at: 880, window(1.5)) < Spectrum.level(at: 440, window(1.5)) - 30)
        #expect(Spectrum.level(at: 440, window(3.5)) < Spectrum.level(at: 880, window(3.5)) - 30)
    }
}
