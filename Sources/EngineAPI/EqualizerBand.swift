// One of a session's filters (`Filters`): a band of the 15-band equalizer, in Lavalink v4's shape.

/// One equalizer band's gain.
public struct EqualizerBand: Sendable, Equatable, Codable {
    /// 0 (25 Hz) to 14 (16 kHz).
    public var band: Int
    /// −0.25 (muted) to 1.0; 0 is flat, 0.25 doubles the band's amplitude (+6 dB).
    public var gain: Double

    public init(band: Int, gain: Double) {
        self.band = band
        self.gain = gain
    }
}
