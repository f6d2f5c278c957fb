// `PUT /fence`: what a cluster pair's engine may play, and until when.
//
// A pair may play a session only while it can prove its lease (docs/cluster.md, "The fence"). Its
// Router proves it by renewing, and tells its engine after each renewal: these sessions, for
// `valid_ms` more. The engine stops every play of a session not named (at once) and every play
// once the time has run out without a newer fence (on the tick it runs out), each with
// `finished`/`stopped` code `fenced`, and refuses to start one (409 `fenced`). So whatever the
// Router does late (a play asked for just after its fence, a command in flight when the session
// left), the engine never plays past the bound. An engine that was never fenced plays anything
// (a pair that is not in a cluster).
//
// Fences from one holder (a Router process) apply in version order: a fence delivered after a
// newer one is ignored. A new holder (a Router started again) replaces the last one's fence.
public import WireProtocol

public struct Fence: Sendable, Equatable, Codable {
    /// Who sets it: one Router process.
    public var holder: String
    /// Increases with every fence the holder sends.
    public var version: UInt64
    /// How long from its arrival the fence lets the sessions play.
    public var validMS: Int64
    /// The sessions that may play.
    public var sessions: [SessionID]

    public init(holder: String, version: UInt64, validMS: Int64, sessions: [SessionID]) {
        self.holder = holder
        self.version = version
        self.validMS = validMS
        self.sessions = sessions
    }

    public static let maxValidMS: Int64 = 600_000
    /// The largest version a JSON number holds exactly (2^53 − 1): a Router counting one a round
    /// reaches it in 100 million years.
    public static let maxVersion: UInt64 = (1 << 53) - 1
    public static let maxSessions = 100_000
    public static let maxHolderLength = 64

    /// What is wrong with this fence, if anything.
    public var problem: String? {
        // Characters as JSON Schema's maxLength counts them (code points), as the OpenAPI document says.
        if holder.isEmpty || holder.unicodeScalars.count > Self.maxHolderLength {
            return "\"holder\" must be 1 to \(Self.maxHolderLength) characters"
        }
        if version > Self.maxVersion { return "\"version\" must be from 0 to \(Self.maxVersion), got \(version)" }
        if !(0...Self.maxValidMS).contains(validMS) { return "\"valid_ms\" must be from 0 to \(Self.maxValidMS), got \(validMS)" }
        if sessions.count > Self.maxSessions { return "\"sessions\" may name at most \(Self.maxSessions) sessions" }
        return nil
    }

    enum CodingKeys: String, CodingKey {
        case holder, version, sessions
        case validMS = "valid_ms"
    }
}

/// The engine's answer to a fence, and what `GET /fence` shows.
public struct FenceState: Sendable, Equatable, Codable {
    /// Whether this fence was applied (false: one newer from the same holder came first).
    public var applied: Bool
    public var holder: String?
    public var version: UInt64?
    /// How long the sessions may still play (0: the time has run out).
    public var remainingMS: Int64?
    public var sessions: Int?
    /// Plays stopped because of this fence (not named, or out of time).
    public var stopped: Int

    public init(applied: Bool, holder: String?, version: UInt64?, remainingMS: Int64?, sessions: Int?, stopped: Int) {
        self.applied = applied
        self.holder = holder
        self.version = version
        self.remainingMS = remainingMS
        self.sessions = sessions
        self.stopped = stopped
    }

    enum CodingKeys: String, CodingKey {
        case applied, holder, version, sessions, stopped
        case remainingMS = "remaining_ms"
    }
}
