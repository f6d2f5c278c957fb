// A token refused on a WebSocket upgrade travels as a close frame's reason, which may hold 123
// bytes: the reason is the error's code and message, cut on a character boundary.
import HTTPTypes
import Testing
import ServiceSupport

@testable import TonearmRouter

@Suite struct ClientConnectionsTests {
    @Test func aCloseReasonFitsAFrame() {
        let short = APIError(status: .unauthorized, code: "unauthorized", message: "no token")
        #expect(ClientConnections.closeReason(short) == "unauthorized: no token")
        let long = APIError(status: .forbidden, code: "forbidden", message: String(repeating: "é", count: 200))
        let reason = ClientConnections.closeReason(long)
        #expect(reason.utf8.count <= 123 && reason.utf8.count >= 121)
        #expect(reason.hasPrefix("forbidden: éé"))
    }
}
