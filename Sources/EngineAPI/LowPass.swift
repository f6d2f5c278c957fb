// One of a session's filters (`Filters`): the low-pass, in Lavalink v4's shape.

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
