// One of a session's filters (`Filters`): the channel mix, in Lavalink v4's shape.

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
