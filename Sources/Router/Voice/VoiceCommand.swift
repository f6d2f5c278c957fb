// The `voice` command's arguments: what a bot's main gateway gave it for one guild
// (VOICE_STATE_UPDATE: user_id, session_id, channel_id; VOICE_SERVER_UPDATE: token, endpoint).
// Untrusted: each field must be present, a string, and of a shape Discord gives; the endpoint
// is a host and an optional port, nothing that could change the URL it goes into.
import DiscordVoice
import Foundation
import ServiceSupport
import WireProtocol

enum VoiceCommand {
    private struct Arguments: Decodable {
        var user_id: String?
        var session_id: String?
        var channel_id: String?
        var token: String?
        var endpoint: String?
    }

    static func credentials(_ data: Data, guild: SessionID) throws(APIError) -> VoiceCredentials {
        let arguments: Arguments
        do {
            arguments = try JSONDecoder().decode(Arguments.self, from: data)
        } catch {
            throw .badRequest("invalid_voice", "voice takes the strings user_id, session_id, channel_id, token and endpoint")
        }
        func field(_ value: String?, _ name: String, snowflake: Bool = false) throws(APIError) -> String {
            guard let value, !value.isEmpty, value.utf8.count <= 256,
                  value.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            else { throw .badRequest("invalid_voice", "\(name) must be 1 to 256 printable characters without spaces") }
            if snowflake, !(value.utf8.count <= 20 && value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 })) {
                throw .badRequest("invalid_voice", "\(name) must be a Discord id: up to 20 digits")
            }
            return value
        }
        let endpoint = try field(arguments.endpoint, "endpoint")
        guard endpointIsHostAndPort(endpoint) else {
            throw .badRequest("invalid_voice", "endpoint must be a host name and an optional port, as VOICE_SERVER_UPDATE gives it")
        }
        return VoiceCredentials(
            guildID: guild.description,
            userID: try field(arguments.user_id, "user_id", snowflake: true),
            sessionID: try field(arguments.session_id, "session_id"),
            channelID: try field(arguments.channel_id, "channel_id", snowflake: true),
            token: try field(arguments.token, "token"),
            endpoint: endpoint)
    }

    /// `host` or `host:port`: letters, digits, dots and hyphens, then up to 5 digits.
    static func endpointIsHostAndPort(_ endpoint: String) -> Bool {
        let parts = endpoint.split(separator: ":", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let host = parts.first, !host.isEmpty, host.utf8.count <= 253,
              host.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x41 && $0 <= 0x5A) || $0 == 0x2E || $0 == 0x2D })
        else { return false }
        guard parts.count == 2 else { return true }
        guard let port = Int(parts[1]), (1...65535).contains(port), parts[1].utf8.count <= 5 else { return false }
        return true
    }
}
