// The filters that shape the sound without moving in time: karaoke (centre removal) and low-pass.
import EngineAPI
import Foundation

/// Removes the centre (what both channels share, usually the voice) by `level`, keeping the
/// centre's part in a band around `filterBand` (usually bass and kick) at `monoLevel`:
/// out = x − level · (mid − monoLevel · bandpass(mid)), mid = (left + right) / 2.
struct KaraokeFilter {
    private var level: Float = 1
    private var monoLevel: Float = 1
    // RBJ band-pass (0 dB at the centre), transposed direct form II, on the mid signal.
    private var b0 = 0.0, b2 = 0.0, a1 = 0.0, a2 = 0.0
    private var state = (0.0, 0.0)

    mutating func set(_ settings: Karaoke) {
        level = Float(settings.level)
        monoLevel = Float(settings.monoLevel)
        let omega = 2 * Double.pi * min(settings.filterBand, FilterChain.sampleRate * 0.45) / FilterChain.sampleRate
        let q = settings.filterBand / settings.filterWidth
        let alpha = sin(omega) / (2 * q)
        let a0 = 1 + alpha
        b0 = alpha / a0
        b2 = -alpha / a0
        a1 = -2 * cos(omega) / a0
        a2 = (1 - alpha) / a0
    }

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        var (s1, s2) = state
        var i = 0
        while i + 1 < samples.count {
            let mid = (Double(samples[i]) + Double(samples[i + 1])) / 2
            let band = b0 * mid + s1
            s1 = -a1 * band + s2
            s2 = b2 * mid - a2 * band
            let removed = level * (Float(mid) - monoLevel * Float(band))
            samples[i] -= removed
            samples[i + 1] -= removed
            i += 2
        }
        state = (s1.flushed, s2.flushed)
    }
}

/// One-pole low-pass per channel: each output moves 1/`smoothing` of the way to the input.
struct LowPassFilter {
    var smoothing: Float = 20
    private var left: Float = 0, right: Float = 0

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let k = 1 / smoothing
        var i = 0
        while i + 1 < samples.count {
            left += (samples[i] - left) * k
            right += (samples[i + 1] - right) * k
            samples[i] = left
            samples[i + 1] = right
            i += 2
        }
        left = Float(Double(left).flushed)
        right = Float(Double(right).flushed)
    }
}
