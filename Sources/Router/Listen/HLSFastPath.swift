// `/hls` answered on the connection's event loop. Once a session's segmenter runs, every playlist,
// segment and `init.mp4` a player asks for is already in memory, and taking such a request through
// the framework (the request handed to a task and the answer back to the event loop, the router,
// the middlewares) cost several times the answer itself: 1,000 players polling one Router took
// 10.5–14.5 % of a core. This handler sits among the HTTP handlers and answers what it can from
// memory; everything else goes on to the routes as it came: other paths, a token the routes must
// refuse, a player's first playlist (which waits for the first segments), a session another pair
// plays, a segment not kept, and any request behind one the routes are still answering (HTTP/1.1
// answers in order).
import Foundation
import HTTPTypes
import HummingbirdCore
import NIOCore
import NIOHTTPTypes
import Synchronization
import WireProtocol

/// What `HLSFastPath` may answer, and with what: a request it is sure of, or nil.
struct HLSFastAnswers: Sendable {
    let hls: HLSOutput
    let access: AccessControl
    /// Whether this pair plays a session (in a cluster, another pair's is forwarded by the routes).
    var playsHere: @Sendable (SessionID) -> Bool = { _ in true }
    var serverName = "tonearm-router"
    let dates = HTTPDate()

    /// The answer to `request` if it is a `GET` of a file of an HLS stream this pair plays, that
    /// its token may hear and that is in memory; nil for anything the routes must answer.
    func answer(_ request: HTTPRequest) -> (HTTPResponse, ByteBuffer)? {
        guard request.method == .get, let target = request.path, target.hasPrefix("/hls/") else { return nil }
        let uri = URI(target)
        let parts = uri.path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, let id = try? RouterApplication.sessionID(path: String(parts[2])), playsHere(id) else { return nil }
        let query = uri.queryParameters["token"]
        let token = AccessControl.token(authorization: request.headerFields[.authorization], query: query)
        guard (try? access.authorizeListening(token: token, for: id)) != nil else { return nil }
        let file: HLSFile
        switch parts[3] {
        case "index.m3u8":
            guard let text = hls.ready(id, query: HLSFile.query(token: query)) else { return nil }
            file = .playlist(text)
        case "init.mp4":
            file = .initialization
        default:
            guard let sequence = HLSFile.sequence(parts[3]), let segment = hls.segment(id, sequence: sequence) else { return nil }
            file = .segment(segment)
        }
        var headers = file.headers
        headers[.contentLength] = String(file.body.readableBytes)
        headers[.date] = dates.now
        headers[.server] = serverName
        return (HTTPResponse(status: .ok, headerFields: headers), file.body)
    }
}

/// Answers the requests `HLSFastAnswers` is sure of where they arrive; passes the rest on.
///
/// `@unchecked Sendable`: used on its channel's event loop only.
final class HLSFastPath: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let answers: HLSFastAnswers
    /// Requests passed on whose answer has not ended: one answered here meanwhile would overtake it.
    private var passedOn = 0
    /// Whether the body and end of a request answered here are still to come (they are dropped).
    private var dropping = false
    /// Whether a request answered here asked to close the connection: nothing after it is read.
    private var closing = false

    init(answers: HLSFastAnswers) { self.answers = answers }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        let part = unwrapInboundIn(data)
        switch part {
        case .head(let request):
            dropping = false
            if passedOn == 0, let (head, body) = answers.answer(request) {
                dropping = true
                closing = request.headerFields[.connection]?.lowercased() == "close"
                respond(head, body, context: context)
                return
            }
            passedOn += 1
        case .body, .end:
            if dropping {
                if case .end = part { dropping = false }
                return
            }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data), passedOn > 0 { passedOn -= 1 }
        context.write(data, promise: promise)
    }

    private func respond(_ head: HTTPResponse, _ body: ByteBuffer, context: ChannelHandlerContext) {
        var head = head
        if closing { head.headerFields[.connection] = "close" }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(body)), promise: nil)
        guard closing else {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            return
        }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// The `Date` header's value (RFC 9110's IMF-fixdate), made at most once a second.
final class HTTPDate: Sendable {
    private let cached = Mutex<(second: Int64, text: String)>((.min, ""))

    var now: String { text(at: Date()) }

    func text(at date: Date) -> String {
        let second = Int64(date.timeIntervalSince1970.rounded(.down))
        return cached.withLock { cached in
            if cached.second != second { cached = (second, Self.format(second)) }
            return cached.text
        }
    }

    static func format(_ second: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(second)))
    }
}
