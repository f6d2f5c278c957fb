// The body of `POST /session/{id}/volume`.

/// A percentage from 0 to 1000 (100 leaves the source as it is).
public struct VolumeRequest: Sendable, Equatable, Codable {
    public var volume: Int?

    public init(volume: Int?) { self.volume = volume }
}
