// Two of a session's filters (`Filters`), tremolo and vibrato, which share one shape in Lavalink v4.

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
