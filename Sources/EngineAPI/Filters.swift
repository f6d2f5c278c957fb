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

/// Lavalink's timescale: `speed` plays faster or slower at the same pitch, `pitch` raises or lowers
/// the pitch at the same speed, `rate` does both (a record played faster). Positions stay in the
/// source's time, which runs at speed × rate.
public struct Timescale: Sendable, Equatable, Codable {
    public var speed: Double
    public var pitch: Double
    public var rate: Double

    /// Each factor's range. Speed × rate is how fast the source is read and pitch × rate how much
    /// is time-stretched per frame: at most 4× each, so no session can cost more than that.
    public static let allowed: ClosedRange<Double> = 0.5...2

    public init(speed: Double = 1, pitch: Double = 1, rate: Double = 1) {
        self.speed = speed
        self.pitch = pitch
        self.rate = rate
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            speed: try c.decodeIfPresent(Double.self, forKey: .speed) ?? 1,
            pitch: try c.decodeIfPresent(Double.self, forKey: .pitch) ?? 1,
            rate: try c.decodeIfPresent(Double.self, forKey: .rate) ?? 1)
    }

    /// Whether it leaves the sound as it is.
    public var isIdentity: Bool { speed == 1 && pitch == 1 && rate == 1 }

    /// How fast the source's time runs against real time.
    public var sourceRate: Double { speed * rate }
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

/// Takes out what is mixed to the centre (usually the voice), keeping a band around `filterBand`
/// (usually the bass) at `monoLevel`.
public struct Karaoke: Sendable, Equatable, Codable {
    /// How much of the centre goes: 0 none, 1 all.
    public var level: Double
    /// How much of the centre stays in the kept band: 0 none, 1 all.
    public var monoLevel: Double
    /// The kept band's centre, in Hz.
    public var filterBand: Double
    /// The kept band's width, in Hz.
    public var filterWidth: Double

    public init(level: Double = 1, monoLevel: Double = 1, filterBand: Double = 220, filterWidth: Double = 100) {
        self.level = level
        self.monoLevel = monoLevel
        self.filterBand = filterBand
        self.filterWidth = filterWidth
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            level: try c.decodeIfPresent(Double.self, forKey: .level) ?? 1,
            monoLevel: try c.decodeIfPresent(Double.self, forKey: .monoLevel) ?? 1,
            filterBand: try c.decodeIfPresent(Double.self, forKey: .filterBand) ?? 220,
            filterWidth: try c.decodeIfPresent(Double.self, forKey: .filterWidth) ?? 100)
    }
}

/// The level falls by `depth` and comes back, `frequency` times a second.
public typealias Tremolo = Oscillation

/// The pitch swings up and down `frequency` times a second, by ±2.5 % × depth at 2 Hz (the swing
/// grows with the rate: ±17.6 % × depth at 14 Hz).
public typealias Vibrato = Oscillation

/// A swing `frequency` times a second, as deep as `depth` (0 to 1): tremolo's and vibrato's shape.
public struct Oscillation: Sendable, Equatable, Codable {
    public var frequency: Double
    public var depth: Double

    public init(frequency: Double = 2, depth: Double = 0.5) {
        self.frequency = frequency
        self.depth = depth
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            frequency: try c.decodeIfPresent(Double.self, forKey: .frequency) ?? 2,
            depth: try c.decodeIfPresent(Double.self, forKey: .depth) ?? 0.5)
    }
}

/// The sound circles from one ear to the other, `rotationHz` times a second ("8D audio").
public struct Rotation: Sendable, Equatable, Codable {
    public var rotationHz: Double

    public init(rotationHz: Double = 0) { self.rotationHz = rotationHz }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(rotationHz: try c.decodeIfPresent(Double.self, forKey: .rotationHz) ?? 0)
    }
}

/// Each sample x becomes offset + scale · (sinOffset + sin(sinScale·x)) · (cosOffset +
/// cos(cosScale·x)) · (tanOffset + tan(tanScale·x)), held within −1…1.
public struct Distortion: Sendable, Equatable, Codable {
    public var sinOffset: Double, sinScale: Double
    public var cosOffset: Double, cosScale: Double
    public var tanOffset: Double, tanScale: Double
    public var offset: Double, scale: Double

    public init(
        sinOffset: Double = 0, sinScale: Double = 1, cosOffset: Double = 0, cosScale: Double = 1,
        tanOffset: Double = 0, tanScale: Double = 1, offset: Double = 0, scale: Double = 1
    ) {
        self.sinOffset = sinOffset
        self.sinScale = sinScale
        self.cosOffset = cosOffset
        self.cosScale = cosScale
        self.tanOffset = tanOffset
        self.tanScale = tanScale
        self.offset = offset
        self.scale = scale
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func value(_ key: CodingKeys, _ otherwise: Double) throws -> Double {
            try c.decodeIfPresent(Double.self, forKey: key) ?? otherwise
        }
        self.init(
            sinOffset: try value(.sinOffset, 0), sinScale: try value(.sinScale, 1),
            cosOffset: try value(.cosOffset, 0), cosScale: try value(.cosScale, 1),
            tanOffset: try value(.tanOffset, 0), tanScale: try value(.tanScale, 1),
            offset: try value(.offset, 0), scale: try value(.scale, 1))
    }
}

/// Each output channel as a mix of both inputs; 0.5 everywhere is mono.
public struct ChannelMix: Sendable, Equatable, Codable {
    public var leftToLeft: Double, leftToRight: Double
    public var rightToLeft: Double, rightToRight: Double

    public init(leftToLeft: Double = 1, leftToRight: Double = 0, rightToLeft: Double = 0, rightToRight: Double = 1) {
        self.leftToLeft = leftToLeft
        self.leftToRight = leftToRight
        self.rightToLeft = rightToLeft
        self.rightToRight = rightToRight
    }

    public static let identity = ChannelMix()

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            leftToLeft: try c.decodeIfPresent(Double.self, forKey: .leftToLeft) ?? 1,
            leftToRight: try c.decodeIfPresent(Double.self, forKey: .leftToRight) ?? 0,
            rightToLeft: try c.decodeIfPresent(Double.self, forKey: .rightToLeft) ?? 0,
            rightToRight: try c.decodeIfPresent(Double.self, forKey: .rightToRight) ?? 1)
    }
}

/// Lets the low frequencies through: each sample moves 1/`smoothing` of the way from the last
/// output to the input (20 → about −3 dB at 400 Hz); 1 or less is off.
public struct LowPass: Sendable, Equatable, Codable {
    public var smoothing: Double

    public init(smoothing: Double = 20) { self.smoothing = smoothing }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(smoothing: try c.decodeIfPresent(Double.self, forKey: .smoothing) ?? 20)
    }
}

extension DecodingError {
    /// The filter (one of `Filters.names`) whose object the error is in: the first key of a
    /// filters object, or the one under a body's `filters`.
    var filterName: String? {
        let path: [any CodingKey]
        switch self {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context),
            .dataCorrupted(let context):
            path = context.codingPath
        @unknown default: return nil
        }
        let keys = path.map(\.stringValue)
        let start = keys.first == "filters" ? 1 : 0
        guard keys.count > start, Filters.names.contains(keys[start]) else { return nil }
        return keys[start]
    }

    /// The words both processes answer `invalid_filters` with when a filter's JSON has the wrong
    /// shape, naming the field (not Swift's description of the error); nil when the error is not
    /// inside a filter.
    public var filterProblem: String? {
        guard let name = filterName else { return nil }
        if name == "equalizer" {
            return "equalizer is a list of {\"band\": 0 to 14, \"gain\": -0.25 to 1.0}: \(fieldProblem)"
        }
        return "\(name) is an object of numbers: \(fieldProblem)"
    }

    /// What is wrong, in a few words that name the field.
    private var fieldProblem: String {
        switch self {
        case .keyNotFound(let key, _): "an entry has no \"\(key.stringValue)\""
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            "\(context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")) has the wrong type or is out of range"
        @unknown default: "it cannot be read"
        }
    }
}
