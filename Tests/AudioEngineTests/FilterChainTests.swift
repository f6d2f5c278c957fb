import EngineAPI
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

/// Lavalink's other filters as a listener hears them, each on a known signal run through the
/// chain in 20 ms frames as the pipeline runs it.
@Suite struct FilterChainTests {
    /// `seconds` of a sine at `hertz` (−12 dBFS), left and right as `right` makes them from it.
    static func tone(_ hertz: Double, seconds: Double = 2, right: (Float) -> Float = { $0 }) -> [Float] {
        let count = Int(48_000 * seconds)
        var samples = [Float](repeating: 0, count: 2 * count)
        for i in 0..<count {
            let value = Float(0.25 * sin(2 * .pi * hertz * Double(i) / 48_000))
            samples[2 * i] = value
            samples[2 * i + 1] = right(value)
        }
        return samples
    }

    static func filtered(_ samples: [Float], _ filters: Filters) -> [Float] {
        var chain = FilterChain()
        chain.set(filters)
        var out = samples
        out.withUnsafeMutableBufferPointer { all in
            var start = 0
            while start < all.count {
                let end = min(start + 1_920, all.count)
                chain.process(UnsafeMutableBufferPointer(rebasing: all[start..<end]))
                start = end
            }
        }
        return out
    }

    static func right(_ interleaved: [Float]) -> [Float] { Spectrum.left(Array(interleaved.dropFirst())) }

    /// Level in dBFS of each `window`-sample stretch of `channel`.
    static func levels(_ channel: [Float], window: Int = 960) -> [Double] {
        stride(from: 0, to: channel.count - window + 1, by: window).map { Spectrum.dBFS(Array(channel[$0..<($0 + window)])) }
    }

    @Test func tremoloSwingsTheLevelAtItsRateByItsDepth() {
        // 4 Hz at depth 0.5: the level falls to half (−6 dB) every 250 ms and comes back.
        let out = Spectrum.left(Self.filtered(Self.tone(1_000), Filters(tremolo: Tremolo(frequency: 4, depth: 0.5))))
        let levels = Self.levels(out, window: 480)  // 10 ms windows
        let input = Spectrum.dBFS(Spectrum.left(Self.tone(1_000)))
        #expect(abs(levels.max()! - input) < 0.3, "loudest \(levels.max()!) dB against \(input) dB")
        #expect(abs(levels.min()! - (input - 6.02)) < 0.5, "quietest \(levels.min()!) dB")
        // The quietest window of each 250 ms cycle sits in its middle (125 ms, then every 250 ms).
        for cycle in 0..<7 {
            let window = levels[(cycle * 25)..<(cycle * 25 + 25)]
            let quietest = window.indices.min { window[$0] < window[$1] }!
            #expect(abs(quietest - (cycle * 25 + 12)) <= 1, "cycle \(cycle): quietest at \(quietest * 10) ms")
        }
    }

    @Test func vibratoSwingsThePitchAndKeepsTheLevel() {
        // 2 Hz at depth 1: ±2.5 % around 1 kHz. Count zero crossings per 50 ms (±1 crossing).
        let out = Spectrum.left(Self.filtered(Self.tone(1_000), Filters(vibrato: Vibrato(frequency: 2, depth: 1))))
        var hertz: [Double] = []
        for start in stride(from: 4_800, to: out.count - 2_400, by: 2_400) {
            let window = out[start..<(start + 2_400)]
            let crossings = zip(window, window.dropFirst()).filter { ($0 < 0) != ($1 < 0) }.count
            hertz.append(Double(crossings) / 2 / 0.05)
        }
        #expect(hertz.max()! > 1_015 && hertz.max()! < 1_035, "highest \(hertz.max()!) Hz")
        #expect(hertz.min()! < 985 && hertz.min()! > 965, "lowest \(hertz.min()!) Hz")
        let level = Spectrum.dBFS(Array(out[48_000...])) - Spectrum.dBFS(Spectrum.left(Self.tone(1_000)))
        #expect(abs(level) < 0.3, "level changed by \(level) dB")
    }

    @Test func rotationMovesTheSoundBetweenTheEars() {
        // 1 Hz: hard right a quarter second in (left silent), hard left at three quarters.
        let out = Self.filtered(Self.tone(440, seconds: 1), Filters(rotation: Rotation(rotationHz: 1)))
        let left = Self.levels(Spectrum.left(out), window: 480), right = Self.levels(Self.right(out), window: 480)
        let plain = Spectrum.dBFS(Spectrum.left(Self.tone(440, seconds: 1)))
        #expect(left[24] < plain - 30 && abs(right[24] - plain) < 1, "at 250 ms: left \(left[24]) dB, right \(right[24]) dB")
        #expect(right[74] < plain - 30 && abs(left[74] - plain) < 1, "at 750 ms: left \(left[74]) dB, right \(right[74]) dB")
        #expect(abs(left[0] - right[0]) < 0.5, "at the start both sides are level")
    }

    @Test func karaokeRemovesTheCentreAndKeepsTheSidesAndTheBass() {
        let karaoke = Filters(karaoke: Karaoke())
        let voice = Spectrum.left(Self.filtered(Self.tone(1_000), karaoke))
        let side = Spectrum.left(Self.filtered(Self.tone(1_000, right: { -$0 }), karaoke))
        let bass = Spectrum.left(Self.filtered(Self.tone(220), karaoke))
        let plain = Spectrum.dBFS(Spectrum.left(Self.tone(1_000)))
        let second = 48_000..<96_000
        #expect(Spectrum.dBFS(Array(voice[second])) - plain < -15, "a centred 1 kHz voice")
        #expect(abs(Spectrum.dBFS(Array(side[second])) - plain) < 0.1, "a 1 kHz instrument on the sides")
        #expect(abs(Spectrum.dBFS(Array(bass[second])) - plain) < 0.5, "a centred 220 Hz bass")
    }

    @Test func lowPassLetsTheBassThroughAndNotTheTreble() {
        let lowPass = Filters(lowPass: LowPass(smoothing: 20))
        let second = 48_000..<96_000
        let bass = Spectrum.dBFS(Array(Spectrum.left(Self.filtered(Self.tone(60), lowPass))[second]))
        let treble = Spectrum.dBFS(Array(Spectrum.left(Self.filtered(Self.tone(8_000), lowPass))[second]))
        let plain = Spectrum.dBFS(Spectrum.left(Self.tone(60)))
        #expect(abs(bass - plain) < 0.5, "60 Hz: \(bass - plain) dB")
        #expect(treble - plain < -20, "8 kHz: \(treble - plain) dB")
    }

    @Test func channelMixSwapsAndMixesTheSides() {
        let leftOnly = Self.tone(440, seconds: 0.5, right: { _ in 0 })
        let swapped = Self.filtered(leftOnly, Filters(channelMix: ChannelMix(leftToLeft: 0, leftToRight: 1, rightToLeft: 1, rightToRight: 0)))
        #expect(Spectrum.rms(Spectrum.left(swapped)) == 0)
        #expect(abs(Spectrum.dBFS(Self.right(swapped)) - Spectrum.dBFS(Spectrum.left(leftOnly))) < 0.01)
        let mono = Self.filtered(leftOnly, Filters(channelMix: ChannelMix(leftToLeft: 0.5, leftToRight: 0.5, rightToLeft: 0.5, rightToRight: 0.5)))
        #expect(Spectrum.left(mono) == Self.right(mono))
    }

    @Test func distortionStaysWithinFullScaleWhateverItIsGiven() {
        let wild = Filters(distortion: Distortion(tanScale: 1_000, offset: 0.5, scale: 1_000))
        let out = Self.filtered(Self.tone(440, seconds: 0.5), wild)
        #expect(out.allSatisfy { $0.isFinite && abs($0) <= 1 })
        let gentle = Self.filtered(Self.tone(440, seconds: 0.5), Filters(distortion: Distortion(sinScale: 2, cosOffset: 1, cosScale: 0, tanOffset: 1, tanScale: 0, scale: 0.5)))
        // 0.5 · sin(2x) · 2 · 1 = sin(2x) ≈ 2x for small x: twice the input, with its shape bent.
        #expect(Spectrum.dBFS(Spectrum.left(gentle)) - Spectrum.dBFS(Spectrum.left(Self.tone(440, seconds: 0.5))) > 4)
    }

    @Test func aChangeKeepsTheOscillatorsPhaseSoNothingJumps() {
        // Changing the tremolo's depth mid-cycle continues the same cycle: no jump between frames.
        var chain = FilterChain()
        var samples = Self.tone(1_000, seconds: 0.04, right: { _ in 0 }).map { _ in Float(0.5) }
        chain.set(Filters(tremolo: Tremolo(frequency: 4, depth: 0.5)))
        samples.withUnsafeMutableBufferPointer { chain.process(UnsafeMutableBufferPointer(rebasing: $0[0..<1_920])) }
        chain.set(Filters(tremolo: Tremolo(frequency: 4, depth: 0.6)))
        samples.withUnsafeMutableBufferPointer { chain.process(UnsafeMutableBufferPointer(rebasing: $0[1_920...])) }
        #expect(abs(samples[1_920] - samples[1_918]) < 0.01, "\(samples[1_918]) then \(samples[1_920])")
    }

    @Test func filtersThatLeaveTheSoundAloneCostNothing() {
        for filters in [
            Filters(karaoke: Karaoke(level: 0)), Filters(rotation: Rotation(rotationHz: 0)),
            Filters(channelMix: ChannelMix()), Filters(lowPass: LowPass(smoothing: 1)),
        ] {
            var chain = FilterChain()
            chain.set(filters)
            #expect(chain.isIdentity && filters.isEmpty, "\(filters)")
        }
        #expect(!Filters(tremolo: Tremolo()).isEmpty)
    }

    @Test func numbersOutsideTheirRangeAreNamed() throws {
        #expect(Filters(vibrato: Vibrato(frequency: 15)).problem?.contains("vibrato.frequency is 15.0") == true)
        #expect(Filters(tremolo: Tremolo(depth: 1.5)).problem?.contains("tremolo.depth") == true)
        #expect(Filters(channelMix: ChannelMix(leftToRight: -1)).problem?.contains("channelMix.leftToRight") == true)
        #expect(Filters(distortion: Distortion(scale: 1e300)).problem?.contains("distortion.scale") == true)
        #expect(Filters(karaoke: Karaoke(filterWidth: 0)).problem?.contains("karaoke.filterWidth") == true)
        // Lavalink's JSON, fields left out taking its defaults.
        let json = #"{"karaoke":{"level":0.8},"tremolo":{},"lowPass":{"smoothing":5},"channelMix":{"leftToRight":0.5}}"#
        let decoded = try JSONDecoder().decode(Filters.self, from: Data(json.utf8))
        #expect(decoded.karaoke == Karaoke(level: 0.8) && decoded.tremolo == Tremolo() && decoded.lowPass == LowPass(smoothing: 5))
        #expect(decoded.channelMix == ChannelMix(leftToRight: 0.5) && decoded.vibrato == nil && decoded.problem == nil)
    }
}
