// `voice_state`: what a session's clients hear about its Discord voice connection.
import DiscordVoice
import ServiceSupport

/// `{"type":"voice_state","session_id","state":"connecting"|"connected"|"disconnected",…}`:
/// connected adds the SSRC and transport mode, and with DAVE comes again with the call's privacy
/// code once the group is ready; disconnected adds Discord's close code (null when the socket
/// ended without one, or this side ended it) and why.
struct VoiceStateEvent: Encodable, Equatable {
    var type = "voice_state"
    var sessionID: String
    var state: String
    var ssrc: UInt32?
    var mode: String?
    var code: Int?
    var reason: String?
    var privacyCode: String?

    enum CodingKeys: String, CodingKey {
        case type, state, ssrc, mode, code, reason
        case privacyCode = "privacy_code"
        case sessionID = "session_id"
    }

    init(sessionID: String, _ connection: VoiceConnectionState) {
        self.sessionID = sessionID
        switch connection {
        case .connecting:
            state = "connecting"
        case .connected(let ssrc, let mode, let privacyCode):
            state = "connected"
            self.ssrc = ssrc
            self.mode = mode.rawValue
            self.privacyCode = privacyCode
        case .disconnected(let code, let reason):
            state = "disconnected"
            self.code = code
            self.reason = reason
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(type, forKey: .type)
        try container.encode(sessionID, forKey: .sessionID)
        try container.encode(state, forKey: .state)
        try container.encodeIfPresent(ssrc, forKey: .ssrc)
        try container.encodeIfPresent(mode, forKey: .mode)
        try container.encodeIfPresent(privacyCode, forKey: .privacyCode)
        if state == "disconnected" {
            // null when there was no close code: a bot tells "no code" from a missing field.
            try container.encode(code, forKey: .code)
            try container.encodeIfPresent(reason, forKey: .reason)
        }
    }

    func json() -> String { JSONCoding.text(self) }
}
