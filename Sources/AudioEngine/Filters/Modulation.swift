// The filters that move with time: tremolo (level), vibrato (pitch, through a delay line whose
// length swings) and rotation (balance). Each oscillator's phase is in cycles, kept in 0..<1.
import EngineAPI
import Foundation

/// The level falls by `depth` and comes back, `frequency` times a second.
struct TremoloFilter {
    let settings: Tremolo
    private(set) var phase: Double

    init(settings: Tremolo, phase: Double) {
        self.settings = settings
        self.phase = phase
    }

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let step = settings.frequency / sampleRate
        var i = 0
        while i + 1 < samples.count {
            let gain = Float(1 - settings.depth * (1 - cos(2 * .pi * phase)) / 2)
            samples[i] *= gain
            samples[i + 1] *= gain
            phase = (phase + step).truncatingRemainder(dividingBy: 1)
            i += 2
        }
    }
}

/// Pitch vibrato: each channel is read from a delay line whose delay swings between 1 sample and
/// `depth` × 4 ms, `frequency` times a second (the swing's rate of change is the pitch change).
struct VibratoFilter {
    static let maxDelay = 0.004 * sampleRate
    /// A power of two above the longest delay and the interpolation's second sample.
    private static let capacity = 512
    var settings = Vibrato()
    private var phase = 0.0
    private var line = [Float](repeating: 0, count: 2 * capacity)
    private var write = 0

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let step = settings.frequency / sampleRate
        let swing = Self.maxDelay * settings.depth
        let mask = Self.capacity - 1
        line.withUnsafeMutableBufferPointer { line in
            var i = 0
            while i + 1 < samples.count {
                line[2 * write] = samples[i]
                line[2 * write + 1] = samples[i + 1]
                let delay = 1 + swing * (1 - cos(2 * .pi * phase)) / 2
                let whole = Int(delay)
                let fraction = Float(delay - Double(whole))
                let newer = (write - whole) & mask
                let older = (write - whole - 1) & mask
                samples[i] = line[2 * newer] + fraction * (line[2 * older] - line[2 * newer])
                samples[i + 1] = line[2 * newer + 1] + fraction * (line[2 * older + 1] - line[2 * newer + 1])
                write = (write + 1) & mask
                phase = (phase + step).truncatingRemainder(dividingBy: 1)
                i += 2
            }
        }
    }
}

/// The sound circles between the ears `hertz` times a second: a balance control swept by a sine
/// (the nearer side at full level, the farther side fading to nothing at the extremes).
struct RotationFilter {
    let hertz: Double
    private(set) var phase: Double

    init(hertz: Double, phase: Double) {
        self.hertz = hertz
        self.phase = phase
    }

    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        let step = hertz / sampleRate
        var i = 0
        while i + 1 < samples.count {
            // 0 (hard left) … π/2 (hard right); the centre, π/4, leaves both sides at full level.
            let angle = (sin(2 * .pi * phase) + 1) * .pi / 4
            samples[i] *= Float(min(1, 2.0.squareRoot() * cos(angle)))
            samples[i + 1] *= Float(min(1, 2.0.squareRoot() * sin(angle)))
            phase = (phase + step).truncatingRemainder(dividingBy: 1)
            i += 2
        }
    }
}

/// The pipeline's one rate: 48 kHz.
let sampleRate = 48_000.0
