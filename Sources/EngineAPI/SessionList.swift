// `GET /sessions`: every session the engine holds (the Router reconciles its queues with it).

/// The engine's sessions.
public struct SessionList: Sendable, Equatable, Codable {
    public var sessions: [SessionInfo]

    public init(sessions: [SessionInfo]) { self.sessions = sessions }
}
