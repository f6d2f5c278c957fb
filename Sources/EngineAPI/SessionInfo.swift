// `GET /session/{id}`, and the answer to every control of a session.
public import WireProtocol

/// One engine session: its state, its current play and where that play is.
public struct SessionInfo: Sendable, Equatable, Codable {
    public var sessionID: SessionID
    public var state: SessionState
    public var playID: UInt64?
    public var url: String?
    public var title: String?
    public var thumbnail: String?
    public var durationMS: Int64?
    public var positionMS: Int64
    public var volume: Int
    public var passthrough: Bool
    public var frames: FrameCounters
    /// The session's filters; absent when it has none.
    public var filters: Filters?
    /// Whether the session's tracks are brought to the engine's target loudness.
    public var normalize: Bool
    /// Whether joins go from a track's cue-out to the next one's cue-in (skipping the silence at
    /// their ends). Always present in the engine's answers.
    public var cue: Bool?
    /// A play held until this wall-clock moment (a hand-over from another engine): not heard
    /// yet. Absent otherwise.
    public var startAtMS: Int64?
    /// A play handed over to another engine at this wall-clock moment: it is not heard from
    /// then on. Absent otherwise.
    public var handOverAtMS: Int64?
    /// The Opus complexity the session's frames are encoded at now (the engine lowers it under
    /// load); absent while it passes packets through or plays nothing.
    public var complexity: Int?

    public init(
        sessionID: SessionID, state: SessionState, playID: UInt64? = nil, url: String? = nil, title: String? = nil,
        thumbnail: String? = nil, durationMS: Int64? = nil, positionMS: Int64 = 0, volume: Int = 100,
        passthrough: Bool = false, frames: FrameCounters = FrameCounters(), filters: Filters? = nil,
        normalize: Bool = false, cue: Bool? = nil, startAtMS: Int64? = nil, handOverAtMS: Int64? = nil,
        complexity: Int? = nil
    ) {
        self.cue = cue
        self.startAtMS = startAtMS
        self.handOverAtMS = handOverAtMS
        self.complexity = complexity
        self.sessionID = sessionID
        self.state = state
        self.playID = playID
        self.url = url
        self.title = title
        self.thumbnail = thumbnail
        self.durationMS = durationMS
        self.positionMS = positionMS
        self.volume = volume
        self.passthrough = passthrough
        self.frames = frames
        self.filters = filters
        self.normalize = normalize
    }

    enum CodingKeys: String, CodingKey {
        case state, url, title, thumbnail, volume, passthrough, frames, filters, normalize, cue, complexity
        case sessionID = "session_id"
        case playID = "play_id"
        case durationMS = "duration_ms"
        case positionMS = "position_ms"
        case startAtMS = "start_at_ms"
        case handOverAtMS = "handover_at_ms"
    }
}
