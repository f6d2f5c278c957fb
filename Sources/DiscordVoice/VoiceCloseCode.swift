// What a voice connection does when Discord's voice gateway closes its WebSocket, by close code
// (Discord's "Voice Close Event Codes"). Tonearm does not hold the bot's main gateway: where only a
// new VOICE_STATE_UPDATE / VOICE_SERVER_UPDATE can help, it reports the code to the bot and waits
// for new credentials.

/// The next step after the voice gateway's socket closed.
public enum VoiceCloseDecision: Equatable, Sendable {
    /// Open a new socket and resume (op 7) the same session: what was missed is sent again.
    case resume
    /// Open a new socket and identify (op 0) again with the same credentials.
    case identifyAgain
    /// Stop; the connection cannot go on with what it holds. The bot hears `disconnected` with
    /// this code and may hand new credentials (after rejoining the channel).
    case give(up: VoiceCloseCode)
}

/// A close code of Discord's voice gateway, with the name Discord gives it.
public struct VoiceCloseCode: RawRepresentable, Equatable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let unknownOpcode = Self(rawValue: 4001)
    public static let decodeFailed = Self(rawValue: 4002)
    public static let notAuthenticated = Self(rawValue: 4003)
    public static let authenticationFailed = Self(rawValue: 4004)
    public static let alreadyAuthenticated = Self(rawValue: 4005)
    public static let sessionNoLongerValid = Self(rawValue: 4006)
    public static let sessionTimeout = Self(rawValue: 4009)
    public static let serverNotFound = Self(rawValue: 4011)
    public static let unknownProtocol = Self(rawValue: 4012)
    public static let disconnected = Self(rawValue: 4014)
    public static let voiceServerCrashed = Self(rawValue: 4015)
    public static let unknownEncryptionMode = Self(rawValue: 4016)
    public static let daveRequired = Self(rawValue: 4017)
    public static let badRequest = Self(rawValue: 4020)
    public static let rateLimited = Self(rawValue: 4021)
    public static let callTerminated = Self(rawValue: 4022)

    public var description: String {
        let names: [Int: String] = [
            4001: "unknown opcode", 4002: "failed to decode payload", 4003: "not authenticated",
            4004: "authentication failed", 4005: "already authenticated", 4006: "session no longer valid",
            4009: "session timeout", 4011: "server not found", 4012: "unknown protocol",
            4014: "disconnected", 4015: "voice server crashed", 4016: "unknown encryption mode",
            4017: "E2EE/DAVE protocol required", 4020: "bad request", 4021: "rate limited",
            4022: "call terminated",
        ]
        return "\(rawValue) (\(names[rawValue] ?? "unknown close code"))"
    }

    /// What to do after a close with `code` (nil: the socket dropped without a close frame).
    /// `resumable` is false before the session was ever established (nothing to resume).
    public static func decide(_ code: Int?, resumable: Bool) -> VoiceCloseDecision {
        guard let code, code >= 4000 else {
            // A dropped connection, a timeout, or a close by a proxy: the session lives on.
            return resumable ? .resume : .identifyAgain
        }
        switch Self(rawValue: code) {
        case .voiceServerCrashed:
            return resumable ? .resume : .identifyAgain
        case .sessionTimeout, .sessionNoLongerValid:
            // The session is gone, the credentials may not be: a new identify tells (4004 if not).
            return .identifyAgain
        default:
            // 4014 needs the main gateway (a new voice state); 4017 and 4016 mean this
            // side offered what the server refuses; 4021/4022 are Discord ending the call; the
            // 400x codes below 4006 are a fault that trying again repeats.
            return .give(up: Self(rawValue: code))
        }
    }
}
