// A session's filters, applied in place to each 20 ms frame of 48 kHz interleaved stereo before the
// volume ramp: equalizer, karaoke, channel mix, distortion, low-pass, tremolo, vibrato, rotation.
// Every filter keeps its state (biquad memories, oscillator phases, the vibrato's delay line)
// across frames and across changes of its own parameters, so a change is heard from the next frame
// without a click. Hand-written rather than libavfilter's (docs/architecture.md says why).
import EngineAPI
import Foundation

public struct FilterChain {
    /// The one rate every filter runs at: the encoder's.
    static let sampleRate = Double(OpusEncoder.sampleRate)

    /// What it was last set to: setting the same again (every frame does) changes nothing.
    private var applied = Filters()
    private var equalizer = Equalizer()
    private var karaoke: KaraokeFilter?
    private var channelMix: ChannelMix?
    private var distortion: Distortion?
    private var lowPass: LowPassFilter?
    private var tremolo: TremoloFilter?
    private var vibrato: VibratoFilter?
    private var rotation: RotationFilter?

    public init() {}

    /// Whether the chain leaves the sound as it is (it then does nothing and costs nothing).
    public var isIdentity: Bool { applied.isEmpty }

    public mutating func set(_ filters: Filters) {
        // The timescale is not the chain's: the pipeline's timescale stage runs it before.
        var filters = filters
        filters.timescale = nil
        guard filters != applied else { return }
        applied = filters
        equalizer.set(filters)
        if let settings = filters.karaoke, settings.level != 0 {
            karaoke = karaoke ?? KaraokeFilter()
            karaoke?.set(settings)
        } else {
            karaoke = nil
        }
        channelMix = filters.channelMix == .identity ? nil : filters.channelMix
        distortion = filters.distortion
        if let settings = filters.lowPass, settings.smoothing > 1 {
            lowPass = lowPass ?? LowPassFilter()
            lowPass?.smoothing = Float(settings.smoothing)
        } else {
            lowPass = nil
        }
        tremolo = filters.tremolo.map { TremoloFilter(settings: $0, phasor: tremolo?.phasor ?? Phasor()) }
        if let settings = filters.vibrato {
            vibrato = vibrato ?? VibratoFilter()
            vibrato?.settings = settings
        } else {
            vibrato = nil
        }
        if let settings = filters.rotation, settings.rotationHz > 0 {
            rotation = RotationFilter(hertz: settings.rotationHz, phasor: rotation?.phasor ?? Phasor())
        } else {
            rotation = nil
        }
    }

    /// Filters interleaved stereo samples in place; returns at once when the chain is the identity.
    public mutating func process(_ samples: UnsafeMutableBufferPointer<Float>) {
        guard !applied.isEmpty else { return }
        if !equalizer.isFlat { equalizer.process(samples) }
        karaoke?.process(samples)
        if let channelMix { Self.mix(samples, channelMix) }
        if let distortion { Self.distort(samples, distortion) }
        lowPass?.process(samples)
        tremolo?.process(samples)
        vibrato?.process(samples)
        rotation?.process(samples)
    }

    private static func mix(_ samples: UnsafeMutableBufferPointer<Float>, _ mix: ChannelMix) {
        let (ll, lr, rl, rr) = (Float(mix.leftToLeft), Float(mix.leftToRight), Float(mix.rightToLeft), Float(mix.rightToRight))
        var i = 0
        while i + 1 < samples.count {
            let (left, right) = (samples[i], samples[i + 1])
            samples[i] = ll * left + rl * right
            samples[i + 1] = lr * left + rr * right
            i += 2
        }
    }

    private static func distort(_ samples: UnsafeMutableBufferPointer<Float>, _ d: Distortion) {
        for i in samples.indices {
            let x = Double(samples[i])
            let shaped = d.offset
                + d.scale * (d.sinOffset + sin(d.sinScale * x)) * (d.cosOffset + cos(d.cosScale * x))
                * (d.tanOffset + tan(d.tanScale * x))
            // tan's poles and inf · 0 can give anything; what reaches the encoder stays a sample.
            samples[i] = shaped.isNaN ? 0 : Float(min(max(shaped, -1), 1))
        }
    }
}

/// A value a filter's memory decays towards but never reaches: below this it is taken as 0, so a
/// filter fed silence does not spend its time on subnormal numbers.
let filterStateFloor = 1e-25

extension Double {
    /// Self, or 0 once it has decayed below what anyone could hear (`filterStateFloor`).
    var flushed: Double { abs(self) < filterStateFloor ? 0 : self }
}
