// Where a track's music begins and ends, read from its decoded samples: most files start and end
// with silence (encoder padding, a fade-out's tail, seconds of room tone), and a gapless join or a
// crossfade over that silence is a gap. With a session's `cue` on, the next track starts at its
// cue-in and the current one ends at its cue-out.
//
// A 10 ms block counts as sound when its loudness — BS.1770's formula, −0.691 + 10·log10 of the
// mean square summed over the two channels, on the block's samples without the K-weighting — is
// at or above −40 LUFS. Blocks this short put a cue within 10 ms of where the sound crosses the
// threshold; a short-term (3 s) window would put it up to 1.5 s off.
import Foundation

enum CuePoints {
    /// The threshold, in LUFS.
    static let thresholdLUFS = -40.0
    /// Interleaved floats in a block: 10 ms of 48 kHz stereo.
    static let blockFloats = 960
    /// The most of a track's start skipped as silence, and of its end looked at for it, in floats
    /// (10 s): a track quieter than the threshold for longer than that keeps it.
    static let limitFloats = 2 * 48_000 * 10
    /// The mean square (summed over the channels) at the threshold.
    private static let thresholdSquare = Float(pow(10, (thresholdLUFS + 0.691) / 10))

    /// Whether the block of `samples` from `start` (up to `blockFloats` of them) is sound.
    static func isSound(_ samples: UnsafeBufferPointer<Float>, from start: Int) -> Bool {
        let end = min(start + blockFloats, samples.count)
        guard end > start else { return false }
        var sum: Float = 0
        for i in start..<end { sum += samples[i] * samples[i] }
        // Two channels summed: the sum over the block's frames of L² + R², over its frame count.
        return sum / Float((end - start) / 2) >= thresholdSquare
    }

    /// The offset of the first block of sound in `samples`, nil if there is none.
    static func firstSound(_ samples: UnsafeBufferPointer<Float>) -> Int? {
        stride(from: 0, to: samples.count, by: blockFloats).first { isSound(samples, from: $0) }
    }

    /// The offset just past the last block of sound in `samples` (0 if there is none).
    static func endOfSound(_ samples: UnsafeBufferPointer<Float>) -> Int {
        guard !samples.isEmpty else { return 0 }
        var start = (samples.count - 1) / blockFloats * blockFloats
        while start >= 0 {
            if isSound(samples, from: start) { return min(start + blockFloats, samples.count) }
            start -= blockFloats
        }
        return 0
    }
}
