// `POST /session/{id}/normalize`: loudness normalisation on or off for the session.

/// Whether the session's tracks are brought to the engine's target loudness.
public struct NormalizeRequest: Sendable, Equatable, Codable {
    public var enabled: Bool?

    public init(enabled: Bool?) { self.enabled = enabled }
}
