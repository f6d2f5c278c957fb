// One of a session's filters (`Filters`): rotation ("8D"), in Lavalink v4's shape.

/// The sound circles from one ear to the other, `rotationHz` times a second ("8D audio").
public struct Rotation: Sendable, Equatable, Codable {
    public var rotationHz: Double

    public init(rotationHz: Double = 0) { self.rotationHz = rotationHz }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(rotationHz: try c.decodeIfPresent(Double.self, forKey: .rotationHz) ?? 0)
    }
}
