// The filters that move with time: tremolo (level), vibrato (pitch, through a delay line whose
// length swings) and rotation (balance). Each runs on a `Phasor`, kept across changes of its
// settings so the swing continues where it was.
import EngineAPI
import Foundation

/// The level falls by `depth` and comes back, `frequency` times a second.
struct TremoloFilter {
    let settings: Tremolo
    private(set) var phasor: Phasor

    init(settings: Tremolo, phasor: Phasor) {
        self.settings = settings
        self.phasor = phasor
    }

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let turn = Phasor.turn(hertz: settings.frequency)
        let halfDepth = settings.depth / 2
        var i = 0
        while i + 1 < samples.count {
            let gain = Float(1 - halfDepth * (1 - phasor.cos))
            samples[i] *= gain
            samples[i + 1] *= gain
            phasor.advance(turn)
            i += 2
        }
        phasor.normalize()
    }
}

/// Pitch vibrato: each channel is read from a delay line whose delay swings between 1 sample and
/// `depth` × 4 ms, `frequency` times a second (the swing's rate of change is the pitch change).
struct VibratoFilter {
    static let maxDelay = 0.004 * FilterChain.sampleRate
    /// A power of two above the longest delay and the interpolation's second sample.
    private static let capacity = 512
    var settings = Vibrato()
    private var phasor = Phasor()
    private var line = [Float](repeating: 0, count: 2 * capacity)
    private var write = 0

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let turn = Phasor.turn(hertz: settings.frequency)
        let swing = Self.maxDelay * settings.depth
        let mask = Self.capacity - 1
        line.withUnsafeMutableBufferPointer { line in
            var i = 0
            while i + 1 < samples.count {
                line[2 * write] = samples[i]
                line[2 * write + 1] = samples[i + 1]
                let delay = 1 + swing * (1 - phasor.cos) / 2
                let whole = Int(delay)
                let fraction = Float(delay - Double(whole))
                let newer = (write - whole) & mask
                let older = (write - whole - 1) & mask
                samples[i] = line[2 * newer] + fraction * (line[2 * older] - line[2 * newer])
                samples[i + 1] = line[2 * newer + 1] + fraction * (line[2 * older + 1] - line[2 * newer + 1])
                write = (write + 1) & mask
                phasor.advance(turn)
                i += 2
            }
        }
        phasor.normalize()
    }
}

/// The sound circles between the ears `hertz` times a second: a balance control swept by a sine
/// (the nearer side at full level, the farther side fading linearly to nothing at the extremes).
struct RotationFilter {
    let hertz: Double
    private(set) var phasor: Phasor

    init(hertz: Double, phasor: Phasor) {
        self.hertz = hertz
        self.phasor = phasor
    }

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let turn = Phasor.turn(hertz: hertz)
        var i = 0
        while i + 1 < samples.count {
            // −1 hard left … 1 hard right; at 0 both sides at full level.
            let pan = Float(phasor.sin)
            samples[i] *= min(1, 1 - pan)
            samples[i + 1] *= min(1, 1 + pan)
            phasor.advance(turn)
            i += 2
        }
        phasor.normalize()
    }
}

