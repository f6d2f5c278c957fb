import Foundation
import Testing

@testable import AudioEngine

/// Where sound begins and ends: 10 ms blocks at or above −40 LUFS (BS.1770's formula on the
/// block, without K-weighting) count, quieter ones do not.
struct CuePointsTests {
    /// `seconds` of stereo sine at `amplitude`.
    func tone(_ amplitude: Float, seconds: Double) -> [Float] {
        (0..<Int(seconds * 48_000)).flatMap { i in
            let v = amplitude * Float(sin(2 * Double.pi * 440 * Double(i) / 48_000))
            return [v, v]
        }
    }

    @Test func theThresholdIsMinusFortyLUFS() {
        // A stereo sine of amplitude A measures −0.691 + 20·log10(A) LUFS: −40 at A = 0.01083.
        for (amplitude, sound) in [(Float(0.0112), true), (Float(0.0104), false), (Float(0), false)] {
            let block = tone(amplitude, seconds: 0.01)
            #expect(block.withUnsafeBufferPointer { CuePoints.isSound($0, from: 0) } == sound, "amplitude \(amplitude)")
        }
    }

    @Test func cueInAndCueOutAreFoundToTheBlock() {
        let samples = [Float](repeating: 0, count: 2 * 4_800 * 3) + tone(0.5, seconds: 0.25) + [Float](repeating: 0, count: 2 * 4_800)
        samples.withUnsafeBufferPointer { buffer in
            #expect(CuePoints.firstSound(buffer) == 2 * 4_800 * 3)
            #expect(CuePoints.endOfSound(buffer) == 2 * 4_800 * 3 + 2 * 12_000)
        }
        let silence = [Float](repeating: 1e-4, count: 96_000)
        silence.withUnsafeBufferPointer { buffer in
            #expect(CuePoints.firstSound(buffer) == nil)
            #expect(CuePoints.endOfSound(buffer) == 0)
        }
    }
}
