import Foundation
import Testing

@testable import AudioEngine

/// The track's level under a layer, frame by frame: down by the depth over the attack, back to
/// exactly 0 dB over the release, at a steady rate in dB (no step anywhere).
struct DuckingTests {
    /// Runs `frames` 20 ms frames of a constant 1.0 through `ducking`; the level in dB at each
    /// frame's last sample.
    func levels(_ ducking: inout Ducking, _ overlay: Overlay, frames: Int) -> [Float] {
        var frame = [Float](repeating: 1, count: 1_920)
        return (0..<frames).map { _ in
            frame = [Float](repeating: 1, count: 1_920)
            frame.withUnsafeMutableBufferPointer { ducking.process($0, overlay) }
            return 20 * log10(frame[1_919])
        }
    }

    @Test func theTrackFallsOverTheAttackAndComesBackOverTheRelease() {
        var ducking = Ducking()
        let sounding = Overlay(sounding: true, depthDB: 12, attackMS: 50, releaseMS: 400)
        let down = levels(&ducking, sounding, frames: 4)
        // 12 dB in 50 ms: 4.8 dB a frame, there by the third.
        #expect(abs(down[0] - -4.8) < 0.01 && abs(down[1] - -9.6) < 0.01 && abs(down[2] - -12) < 0.01, "\(down)")
        #expect(abs(down[3] - -12) < 0.01)
        var ended = sounding
        ended.sounding = false
        let up = levels(&ducking, ended, frames: 21)
        // 12 dB in 400 ms: 0.6 dB a frame, back by the twentieth (exactly 0 dB by the next: the
        // release ends on 0, so the track can pass through again).
        for (index, level) in up.prefix(19).enumerated() {
            #expect(abs(level - (-12 + 0.6 * Float(index + 1))) < 0.01, "frame \(index): \(level)")
        }
        #expect(up[19] > -0.01 && up[20] == 0 && ducking.isIdle, "\(up.suffix(2))")
        // Within a frame, the level moves sample by sample: no two neighbours differ by more than a step.
        var frame = [Float](repeating: 1, count: 1_920)
        var again = Ducking()
        frame.withUnsafeMutableBufferPointer { again.process($0, sounding) }
        let jumps = zip(frame.dropFirst(2), frame).map { abs($0 - $1) }
        #expect((jumps.max() ?? 1) < 0.001)
    }

    @Test func withoutALayerOrADuckNothingChanges() {
        var ducking = Ducking()
        #expect(levels(&ducking, .none, frames: 2) == [0, 0])
        #expect(levels(&ducking, Overlay(sounding: true, depthDB: 0), frames: 2) == [0, 0])
        #expect(ducking.isIdle)
        // No attack: the track is down from the first sample.
        let instant = levels(&ducking, Overlay(sounding: true, depthDB: 6, attackMS: 0), frames: 1)
        #expect(abs(instant[0] - -6) < 0.01)
    }
}
