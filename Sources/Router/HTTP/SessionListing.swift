// What the session API answers with, as Hummingbird writes it.
import EngineAPI
import Hummingbird
import WireProtocol

/// `GET /api/sessions`: the live sessions, for bot operators.
struct SessionListing: ResponseEncodable {
    var sessions: [SessionView]
}

/// `POST /api/sessions/{id}/listen-token`: the token, and where it is heard.
struct ListenToken: ResponseEncodable {
    var sessionID: SessionID
    var token: String
    var listen: String
    var hls: String
    var page: String

    init(sessionID: SessionID, token: String) {
        self.sessionID = sessionID
        self.token = token
        // Both are URL-safe: digits, and `l1.` + digits + `.` + base64url.
        listen = "/listen/\(sessionID).ogg?token=\(token)"
        hls = "/hls/\(sessionID)/index.m3u8?token=\(token)"
        page = "/radio/?session=\(sessionID)&token=\(token)"
    }

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case token, listen, hls, page
    }
}

extension SessionView: ResponseEncodable {}
extension Resolution: ResponseEncodable {}
