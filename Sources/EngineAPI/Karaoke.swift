// One of a session's filters (`Filters`): karaoke, in Lavalink v4's shape.

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
