// What an engine can still take, as its `/health` and its periodic `load` event give it: what a
// placement (a cluster's, or a Lavalink-style client choosing a node) needs in one place.

/// One engine's load.
public struct LoadReport: Hashable, Sendable, Codable {
    /// CPU the engine may use for its sessions now, in cores: its budget less the share the
    /// hypervisor takes (0: no budget, admission off).
    public var budgetCores: Double
    /// Cores the engine used over the last second.
    public var cpuCores: Double
    /// Plays being heard, or opening, that transcode; plays whose packets pass through.
    public var transcoding: Int
    public var passthrough: Int
    /// How many more transcoding plays fit now (at the lowest complexity allowed); passed-through
    /// plays cost a small fraction of one.
    public var headroomSessions: Int
    /// The Opus complexity transcoding sessions encode at now, and the one they are configured for.
    public var complexity: Int
    public var configuredComplexity: Int
    /// Frames late (nulled or deficit) over the last minute, and deadlines met with no frame to
    /// spare (nearly late).
    public var lateFramesPerMinute: UInt64
    public var tightFramesPerMinute: UInt64
    /// Whether a new play would be taken now.
    public var admitting: Bool
    /// Plays refused for the budget since the engine started.
    public var refusals: UInt64
    /// The share of the host's CPU time the hypervisor takes (recent seconds' highest, fading),
    /// by which the budget is lowered; 0 on a host of its own.
    public var stolenShare: Double

    public init(
        budgetCores: Double, cpuCores: Double, transcoding: Int, passthrough: Int, headroomSessions: Int,
        complexity: Int, configuredComplexity: Int, lateFramesPerMinute: UInt64, tightFramesPerMinute: UInt64,
        admitting: Bool, refusals: UInt64, stolenShare: Double = 0
    ) {
        self.budgetCores = budgetCores
        self.cpuCores = cpuCores
        self.transcoding = transcoding
        self.passthrough = passthrough
        self.headroomSessions = headroomSessions
        self.complexity = complexity
        self.configuredComplexity = configuredComplexity
        self.lateFramesPerMinute = lateFramesPerMinute
        self.tightFramesPerMinute = tightFramesPerMinute
        self.admitting = admitting
        self.refusals = refusals
        self.stolenShare = stolenShare
    }

    /// A report without `stolen_share` (an engine from before it) reads as 0.
    public init(from decoder: any Decoder) throws {
        let values = try decoder.container(keyedBy: CodingKeys.self)
        budgetCores = try values.decode(Double.self, forKey: .budgetCores)
        cpuCores = try values.decode(Double.self, forKey: .cpuCores)
        transcoding = try values.decode(Int.self, forKey: .transcoding)
        passthrough = try values.decode(Int.self, forKey: .passthrough)
        headroomSessions = try values.decode(Int.self, forKey: .headroomSessions)
        complexity = try values.decode(Int.self, forKey: .complexity)
        configuredComplexity = try values.decode(Int.self, forKey: .configuredComplexity)
        lateFramesPerMinute = try values.decode(UInt64.self, forKey: .lateFramesPerMinute)
        tightFramesPerMinute = try values.decode(UInt64.self, forKey: .tightFramesPerMinute)
        admitting = try values.decode(Bool.self, forKey: .admitting)
        refusals = try values.decode(UInt64.self, forKey: .refusals)
        stolenShare = try values.decodeIfPresent(Double.self, forKey: .stolenShare) ?? 0
    }

    enum CodingKeys: String, CodingKey {
        case transcoding, passthrough, complexity, admitting, refusals
        case budgetCores = "budget_cores"
        case cpuCores = "cpu_cores"
        case headroomSessions = "headroom_sessions"
        case configuredComplexity = "configured_complexity"
        case lateFramesPerMinute = "late_frames_per_minute"
        case tightFramesPerMinute = "tight_frames_per_minute"
        case stolenShare = "stolen_share"
    }
}
