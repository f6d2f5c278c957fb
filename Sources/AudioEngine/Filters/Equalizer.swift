// The 15-band equalizer: one peaking biquad per band that has a gain (RBJ's audio-EQ cookbook),
// stereo, in place on each 20 ms frame. Hand-written rather than libavfilter's: a graph would add
// its own buffering and a per-frame trip through AVFrames for what is 15 multiply-adds a sample,
// and it could not change its gains without being rebuilt (state lost, a click).
import EngineAPI
import Foundation

struct Equalizer {
    /// ⅔ octave between bands; Q for a ⅔-octave bandwidth, so a band's boost reaches its
    /// neighbours' centres at about a third of its dB and the bands after that hardly at all.
    static let q = 2.15
    private var sections: [Section] = []

    /// Whether every band is flat (the equalizer then does nothing and costs nothing).
    var isFlat: Bool { sections.isEmpty }

    /// Sets each band's gain, keeping the state of bands that stay active (no click).
    mutating func set(_ filters: Filters, sampleRate: Double = FilterChain.sampleRate) {
        var next: [Section] = []
        for (band, gain) in Self.decibels(filters).enumerated() where gain != 0 {
            var section = sections.first { $0.band == band } ?? Section(band: band)
            section.setPeak(frequency: Filters.equalizerFrequencies[band], decibels: gain, q: Self.q, sampleRate: sampleRate)
            next.append(section)
        }
        sections = next
    }

    /// Filters interleaved stereo samples in place.
    mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        for index in sections.indices {
            sections[index].process(samples)
        }
    }

    /// Each band's gain in dB, the last entry for a band winning: a gain g multiplies the band's
    /// amplitude by 1 + 4g (Lavalink: −0.25 mutes, 0.25 doubles), "muted" taken as −40 dB.
    static func decibels(_ filters: Filters) -> [Double] {
        var decibels = [Double](repeating: 0, count: Filters.equalizerFrequencies.count)
        for entry in filters.equalizer where decibels.indices.contains(entry.band) {
            decibels[entry.band] = 20 * log10(max(1 + 4 * entry.gain, 0.01))
        }
        return decibels
    }

    /// One band: a biquad in transposed direct form II, in Double (a 25 Hz peak at 48 kHz has
    /// poles close enough to the unit circle for Float's rounding to be heard), state per channel.
    struct Section {
        let band: Int
        private var b0 = 1.0, b1 = 0.0, b2 = 0.0, a1 = 0.0, a2 = 0.0
        private var left = (0.0, 0.0), right = (0.0, 0.0)

        init(band: Int) { self.band = band }

        mutating func setPeak(frequency: Double, decibels: Double, q: Double, sampleRate: Double) {
            let amplitude = pow(10, decibels / 40)
            let omega = 2 * Double.pi * frequency / sampleRate
            let alpha = sin(omega) / (2 * q)
            let a0 = 1 + alpha / amplitude
            b0 = (1 + alpha * amplitude) / a0
            b1 = -2 * cos(omega) / a0
            b2 = (1 - alpha * amplitude) / a0
            a1 = b1
            a2 = (1 - alpha / amplitude) / a0
        }

        mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
            var (l1, l2) = left
            var (r1, r2) = right
            var i = 0
            while i + 1 < samples.count {
                let x = Double(samples[i])
                let y = b0 * x + l1
                l1 = b1 * x - a1 * y + l2
                l2 = b2 * x - a2 * y
                samples[i] = Float(y)
                let xr = Double(samples[i + 1])
                let yr = b0 * xr + r1
                r1 = b1 * xr - a1 * yr + r2
                r2 = b2 * xr - a2 * yr
                samples[i + 1] = Float(yr)
                i += 2
            }
            left = (l1.flushed, l2.flushed)
            right = (r1.flushed, r2.flushed)
        }
    }
}
