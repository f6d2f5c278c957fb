// An oscillator's phase, advanced sample by sample: the modulation filters' clock.
import Foundation

/// An oscillator as a unit vector (cos, sin of its phase) turned by a fixed angle each sample:
/// two multiplies and an add per value instead of a trigonometric call.
struct Phasor {
    private(set) var cos = 1.0
    private(set) var sin = 0.0

    /// The turn of one sample at `hertz`.
    static func turn(hertz: Double) -> (cos: Double, sin: Double) {
        let angle = 2 * Double.pi * hertz / FilterChain.sampleRate
        return (Foundation.cos(angle), Foundation.sin(angle))
    }

    mutating func advance(_ turn: (cos: Double, sin: Double)) {
        (cos, sin) = (cos * turn.cos - sin * turn.sin, sin * turn.cos + cos * turn.sin)
    }

    /// Back to length 1 (rounding lengthens or shortens it by about 1e-16 a sample).
    mutating func normalize() {
        let length = (cos * cos + sin * sin).squareRoot()
        cos /= length
        sin /= length
    }
}
