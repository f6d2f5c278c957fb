// `POST /session/{id}/filters`: a session's sound filters, in Lavalink v4's shape where Lavalink
// has the filter, so a bot moving from Lavalink sends what it sent there. A filter is on while its
// object is present; a field left out takes Lavalink's default.

/// A session's filters. Empty (no band with a gain, no other filter that changes the sound) means
/// none: the session pays nothing.
public struct Filters: Sendable, Equatable, Codable {
    /// Gains for some of the 15 bands (`Filters.equalizerFrequencies`); a band not listed is flat.
    public var equalizer: [EqualizerBand]
    public var karaoke: Karaoke?
    public var tremolo: Tremolo?
    public var vibrato: Vibrato?
    public var rotation: Rotation?
    public var distortion: Distortion?
    public var channelMix: ChannelMix?
    public var lowPass: LowPass?
    public var timescale: Timescale?

    public init(
        equalizer: [EqualizerBand] = [], karaoke: Karaoke? = nil, tremolo: Tremolo? = nil, vibrato: Vibrato? = nil,
        rotation: Rotation? = nil, distortion: Distortion? = nil, channelMix: ChannelMix? = nil, lowPass: LowPass? = nil,
        timescale: Timescale? = nil
    ) {
        self.equalizer = equalizer
        self.karaoke = karaoke
        self.tremolo = tremolo
        self.vibrato = vibrato
        self.rotation = rotation
        self.distortion = distortion
        self.channelMix = channelMix
        self.lowPass = lowPass
        self.timescale = timescale
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        equalizer = try container.decodeIfPresent([EqualizerBand].self, forKey: .equalizer) ?? []
        karaoke = try container.decodeIfPresent(Karaoke.self, forKey: .karaoke)
        tremolo = try container.decodeIfPresent(Tremolo.self, forKey: .tremolo)
        vibrato = try container.decodeIfPresent(Vibrato.self, forKey: .vibrato)
        rotation = try container.decodeIfPresent(Rotation.self, forKey: .rotation)
        distortion = try container.decodeIfPresent(Distortion.self, forKey: .distortion)
        channelMix = try container.decodeIfPresent(ChannelMix.self, forKey: .channelMix)
        lowPass = try container.decodeIfPresent(LowPass.self, forKey: .lowPass)
        timescale = try container.decodeIfPresent(Timescale.self, forKey: .timescale)
    }

    /// The JSON names of every filter (a client's fields under these are the filters' own).
    public static let names: Set<String> = [
        "equalizer", "karaoke", "tremolo", "vibrato", "rotation", "distortion", "channelMix", "lowPass", "timescale",
    ]

    /// The names of the filters other than the equalizer that are set (for logs).
    public var othersSet: [String] {
        [
            ("karaoke", karaoke != nil), ("tremolo", tremolo != nil), ("vibrato", vibrato != nil),
            ("rotation", rotation != nil), ("distortion", distortion != nil), ("channelMix", channelMix != nil),
            ("lowPass", lowPass != nil), ("timescale", timescale != nil),
        ].compactMap { $0.1 ? $0.0 : nil }
    }

    /// How fast the source's time runs against real time (the timescale's speed × rate).
    public var sourceRate: Double { timescale?.sourceRate ?? 1 }

    /// Whether the filters leave the sound as it is.
    public var isEmpty: Bool {
        equalizer.allSatisfy { $0.gain == 0 } && (karaoke?.level ?? 0) == 0 && tremolo == nil && vibrato == nil
            && (rotation?.rotationHz ?? 0) == 0 && distortion == nil && (channelMix ?? .identity) == .identity
            && (lowPass?.smoothing ?? 1) <= 1 && (timescale ?? Timescale()).isIdentity
    }

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
        var checks: [Limit] = []
        if let karaoke {
            checks += [
                Limit("karaoke.level", karaoke.level, 0...1), Limit("karaoke.monoLevel", karaoke.monoLevel, 0...1),
                Limit("karaoke.filterBand", karaoke.filterBand, 1...20_000),
                Limit("karaoke.filterWidth", karaoke.filterWidth, 1...20_000),
            ]
        }
        if let tremolo {
            checks += [
                Limit("tremolo.frequency", tremolo.frequency, 0.01...1_000), Limit("tremolo.depth", tremolo.depth, 0...1),
            ]
        }
        if let vibrato {
            checks += [Limit("vibrato.frequency", vibrato.frequency, 0.01...14), Limit("vibrato.depth", vibrato.depth, 0...1)]
        }
        if let rotation { checks.append(Limit("rotation.rotationHz", rotation.rotationHz, 0...100)) }
        if let distortion {
            let values = [
                ("sinOffset", distortion.sinOffset), ("sinScale", distortion.sinScale), ("cosOffset", distortion.cosOffset),
                ("cosScale", distortion.cosScale), ("tanOffset", distortion.tanOffset), ("tanScale", distortion.tanScale),
                ("offset", distortion.offset), ("scale", distortion.scale),
            ]
            checks += values.map { Limit("distortion.\($0.0)", $0.1, -1_000...1_000) }
        }
        if let channelMix {
            checks += [
                Limit("channelMix.leftToLeft", channelMix.leftToLeft, 0...1),
                Limit("channelMix.leftToRight", channelMix.leftToRight, 0...1),
                Limit("channelMix.rightToLeft", channelMix.rightToLeft, 0...1),
                Limit("channelMix.rightToRight", channelMix.rightToRight, 0...1),
            ]
        }
        if let lowPass { checks.append(Limit("lowPass.smoothing", lowPass.smoothing, 0...1_000)) }
        if let timescale {
            checks += [
                Limit("timescale.speed", timescale.speed, Timescale.allowed),
                Limit("timescale.pitch", timescale.pitch, Timescale.allowed),
                Limit("timescale.rate", timescale.rate, Timescale.allowed),
            ]
        }
        return checks.lazy.compactMap(\.problem).first
    }

    /// A number and the range it must be in.
    private struct Limit {
        let name: String
        let value: Double
        let allowed: ClosedRange<Double>

        init(_ name: String, _ value: Double, _ allowed: ClosedRange<Double>) {
            self.name = name
            self.value = value
            self.allowed = allowed
        }

        var problem: String? {
            allowed.contains(value) ? nil : "\(name) is \(value); it must be from \(allowed.lowerBound) to \(allowed.upperBound)"
        }
    }
}
