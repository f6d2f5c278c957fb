// Frames of one session (or of the whole engine) the way operators count them.

/// Sent, nulled and deficit frames: the three outcomes of a 20 ms deadline.
public struct FrameCounters: Sendable, Equatable, Codable {
    /// Frames written at their deadline.
    public var sent: UInt64 = 0
    /// Deadlines at which a streaming session had no frame ready.
    public var nulled: UInt64 = 0
    /// Deadlines the pacer itself missed while the session was streaming (the process was late).
    public var deficit: UInt64 = 0

    public init(sent: UInt64 = 0, nulled: UInt64 = 0, deficit: UInt64 = 0) {
        self.sent = sent
        self.nulled = nulled
        self.deficit = deficit
    }

    /// Adds another count to this one.
    public mutating func add(_ other: FrameCounters) {
        sent += other.sent
        nulled += other.nulled
        deficit += other.deficit
    }
}
