// One of a session's filters (`Filters`): the timescale, in Lavalink v4's shape.

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
