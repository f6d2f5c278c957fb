// `POST /session/{id}/filters`: a session's sound filters, in Lavalink v4's shape where Lavalink
// has the filter, so a bot moving from Lavalink sends what it sent there.

/// A session's filters. Empty (no band with a gain) means none: the session pays nothing.
public struct Filters: Sendable, Equatable, Codable {
    /// Gains for some of the 15 bands (`Equalizer.frequencies`); a band not listed is flat.
    public var equalizer: [EqualizerBand]

    public init(equalizer: [EqualizerBand] = []) {
        self.equalizer = equalizer
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        equalizer = try container.decodeIfPresent([EqualizerBand].self, forKey: .equalizer) ?? []
    }

    /// Whether the filters leave the sound as it is.
    public var isEmpty: Bool { equalizer.allSatisfy { $0.gain == 0 } }

    /// The equalizer's 15 bands, centre frequencies in Hz (Lavalink's, ⅔ octave apart).
    public static let equalizerFrequencies: [Double] = [
        25, 40, 63, 100, 160, 250, 400, 630, 1_000, 1_600, 2_500, 4_000, 6_300, 10_000, 16_000,
    ]
    /// Lavalink's range for a band's gain: −0.25 mutes the band, 0 leaves it, 0.25 doubles it.
    public static let equalizerGains: ClosedRange<Double> = -0.25...1

    /// Why these filters cannot be applied, in words for the client; nil when they can.
    public var problem: String? {
        if equalizer.count > Self.equalizerFrequencies.count {
            return "\"equalizer\" has \(equalizer.count) entries; there are \(Self.equalizerFrequencies.count) bands"
        }
        for entry in equalizer {
            guard Self.equalizerFrequencies.indices.contains(entry.band) else {
                return "equalizer band \(entry.band) does not exist (0 to \(Self.equalizerFrequencies.count - 1))"
            }
            guard Self.equalizerGains.contains(entry.gain) else {
                return "equalizer band \(entry.band)'s gain \(entry.gain) is outside -0.25 (muted) to 1.0"
            }
        }
        return nil
    }
}

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
