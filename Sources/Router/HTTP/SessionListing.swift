// What the session API answers with, as Hummingbird writes it.
import EngineAPI
import Hummingbird

/// `GET /api/sessions`: the live sessions, for bot operators.
struct SessionListing: ResponseEncodable {
    var sessions: [SessionView]
}

extension SessionView: ResponseEncodable {}
extension Resolution: ResponseEncodable {}
