import EngineAPI
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

/// The equalizer as a listener hears it: a band's boost or cut at that band's frequency, by the
/// amount Lavalink's gain stands for, and nothing at a band far away.
@Suite struct EqualizerTests {
    /// Two seconds of 100 Hz and 1 kHz at −12 dBFS each, interleaved stereo.
    static func twoTones(seconds: Double = 2) -> [Float] {
        let count = Int(48_000 * seconds)
        var samples = [Float](repeating: 0, count: 2 * count)
        for i in 0..<count {
            let t = Double(i) / 48_000
            let value = Float(0.25 * sin(2 * .pi * 100 * t) + 0.25 * sin(2 * .pi * 1_000 * t))
            samples[2 * i] = value
            samples[2 * i + 1] = value
        }
        return samples
    }

    /// Runs `samples` through `filters` in 20 ms frames, as the pipeline does.
    static func equalized(_ samples: [Float], _ filters: Filters) -> [Float] { FilterChainTests.filtered(samples, filters) }

    /// The second second of the left channel (the filters have settled).
    static func settled(_ samples: [Float]) -> [Float] { Array(Spectrum.left(samples)[48_000..<96_000]) }

    @Test(arguments: [(0.25, 6.02), (0.5, 9.54), (1.0, 13.98), (-0.125, -6.02)])
    func aBandsGainIsHeardAtItsFrequencyAndNotFarAway(gain: Double, decibels: Double) {
        let input = Self.settled(Self.twoTones())
        let output = Self.settled(Self.equalized(Self.twoTones(), Filters(equalizer: [EqualizerBand(band: 8, gain: gain)])))
        let atBand = Spectrum.level(at: 1_000, output) - Spectrum.level(at: 1_000, input)
        let farAway = Spectrum.level(at: 100, output) - Spectrum.level(at: 100, input)
        #expect(abs(atBand - decibels) < 0.5, "1 kHz changed by \(atBand) dB, expected \(decibels)")
        #expect(abs(farAway) < 0.3, "100 Hz changed by \(farAway) dB")
    }

    /// Muted is −40 dB at the band's centre; a cut that deep is as wide as the same boost, so a
    /// band 3⅓ octaves away loses 0.9 dB of it (measured), under the 1 dB a listener could tell.
    @Test func aMutedBandIsGone() {
        let input = Self.settled(Self.twoTones())
        let output = Self.settled(Self.equalized(Self.twoTones(), Filters(equalizer: [EqualizerBand(band: 3, gain: -0.25)])))
        #expect(Spectrum.level(at: 100, output) - Spectrum.level(at: 100, input) < -35)
        #expect(abs(Spectrum.level(at: 1_000, output) - Spectrum.level(at: 1_000, input)) < 1)
    }

    @Test func flatFiltersCostNothingAndTheLastEntryForABandWins() {
        var equalizer = Equalizer()
        equalizer.set(Filters(equalizer: [EqualizerBand(band: 2, gain: 0)]))
        #expect(equalizer.isFlat)
        #expect(Filters(equalizer: [EqualizerBand(band: 2, gain: 0)]).isEmpty)
        let decibels = Equalizer.decibels(Filters(equalizer: [EqualizerBand(band: 4, gain: 1), EqualizerBand(band: 4, gain: 0.25)]))
        #expect(abs(decibels[4] - 6.02) < 0.01 && decibels.filter { $0 != 0 }.count == 1)
    }

    @Test func filtersThatCannotBeAppliedAreNamed() {
        #expect(Filters(equalizer: [EqualizerBand(band: -1, gain: 0)]).problem?.contains("band -1 does not exist") == true)
        #expect(Filters(equalizer: [EqualizerBand(band: 14, gain: -0.3)]).problem?.contains("outside") == true)
        #expect(Filters(equalizer: Array(repeating: EqualizerBand(band: 1, gain: 0), count: 16)).problem != nil)
        #expect(Filters(equalizer: [EqualizerBand(band: 14, gain: 1)]).problem == nil)
    }
}
