import Foundation
import HTTPTypes
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing
import WireProtocol

@testable import TonearmRouter

/// `HLSFastPath` among a connection's HTTP handlers: what it answers itself (a segment, the
/// playlist once the segmenter runs, `init.mp4`, each with the route's headers) and what it
/// passes on to the routes untouched (a refusal, a first playlist, another pair's session, any
/// request behind one the routes are still answering).
@Suite struct HLSFastPathTests {
    let tokens = IdentityTokens(secret: Data("a test secret of enough length!!".utf8))
    let store = SessionStore()

    /// A session whose segmenter has cut three segments, and the fast path over it. The packets
    /// are handed to the segmenter on the test's own thread, as its subscription would.
    func playing() async throws -> (SessionID, String, HLSOutput, HLSFastAnswers) {
        let identity = tokens.issue()
        let id = identity.sessionID
        store.register(id)
        let hls = HLSOutput(store: store)
        _ = await hls.playlist(id, query: "", wait: .zero)
        for index in 0..<320 { hls.take(.audio(ByteBuffer(bytes: [0xFC, UInt8(index % 256)])), for: id) }
        #expect(hls.segment(id, sequence: 3) != nil, "the segmenter cut three segments")
        let answers = HLSFastAnswers(hls: hls, access: AccessControl(tokens: tokens, botToken: "bot"))
        return (id, identity.token, hls, answers)
    }

    /// A gapless join (crossfade 0) sends the new play's `ready` before the old play's
    /// `finished`, which comes once the old track's last samples are out: neither cuts the
    /// segment short nor marks a discontinuity; a stop (the last play's `finished`) does.
    @Test func aGaplessJoinIsNeitherAGapNorADiscontinuity() async throws {
        let (id, _, hls, _) = try await playing()
        func event(_ type: EventType, play: UInt64, reason: FinishReason? = nil) {
            hls.take(.event(WireEvent(type: type, sessionID: id, playID: play, reason: reason).jsonLine()), for: id)
        }
        func audio(_ count: Int) { for _ in 0..<count { hls.take(.audio(ByteBuffer(bytes: [0xFC, 0])), for: id) } }
        event(.ready, play: 1)
        audio(50)
        event(.ready, play: 2)  // the next track's first packet follows
        audio(10)
        event(.finished, play: 1, reason: .finished)  // the old track's last samples are out
        audio(140)
        let playlist = await hls.playlist(id, query: "", wait: .zero)
        #expect(!playlist.contains("#EXT-X-DISCONTINUITY\n"), "\(playlist)")
        #expect(!playlist.contains("#EXTINF:1.") && !playlist.contains("#EXTINF:0."), "a segment was cut short: \(playlist)")
        // The play that came last ends: that is a gap.
        event(.finished, play: 2, reason: .stopped)
        audio(1)
        #expect(await hls.playlist(id, query: "", wait: .zero).contains("#EXTINF:0.400,"))
        audio(100)
        #expect(await hls.playlist(id, query: "", wait: .zero).contains("#EXT-X-DISCONTINUITY\n"))
    }

    func channel(_ answers: HLSFastAnswers) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(HLSFastPath(answers: answers))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 8080)).wait()
        return channel
    }

    func get(_ path: String, _ fields: HTTPFields = [:], method: HTTPRequest.Method = .get) -> HTTPRequestPart {
        .head(HTTPRequest(method: method, scheme: nil, authority: "tonearm", path: path, headerFields: fields))
    }

    /// The answer written back, if any: its head and its body.
    func answer(_ channel: EmbeddedChannel) throws -> (HTTPResponse, ByteBuffer)? {
        guard case .head(let head) = try channel.readOutbound(as: HTTPResponsePart.self) else { return nil }
        guard case .body(let body) = try channel.readOutbound(as: HTTPResponsePart.self),
            case .end = try channel.readOutbound(as: HTTPResponsePart.self)
        else { throw CancellationError() }
        return (head, body)
    }

    @Test func filesInMemoryAreAnsweredWhereTheyArriveWithTheRoutesHeaders() async throws {
        let (id, token, hls, answers) = try await playing()
        let channel = try channel(answers)

        try channel.writeInbound(get("/hls/\(id)/3.m4s?token=\(token)"))
        try channel.writeInbound(HTTPRequestPart.end(nil))
        let segment = try #require(try answer(channel))
        #expect(segment.0.status == .ok && segment.1 == hls.segment(id, sequence: 3))
        #expect(segment.0.headerFields[.contentType] == "audio/mp4" && segment.0.headerFields[.cacheControl] == "public, max-age=60")
        #expect(segment.0.headerFields[.contentLength] == String(segment.1.readableBytes))
        #expect(segment.0.headerFields[.date]?.hasSuffix(" GMT") == true && segment.0.headerFields[.server] == "tonearm-router")
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil, "nothing reaches the routes")

        try channel.writeInbound(get("/hls/\(id)/index.m3u8", [.authorization: "Bearer \(token)"]))
        try channel.writeInbound(HTTPRequestPart.end(nil))
        let playlist = try #require(try answer(channel))
        #expect(playlist.0.headerFields[.contentType] == "application/vnd.apple.mpegurl")
        #expect(String(buffer: playlist.1) == hls.ready(id, query: ""))
        #expect(String(buffer: playlist.1).contains("\n3.m4s\n"))

        // A listen token hears; its playlist's URIs carry it.
        let listen = tokens.listenToken(for: id)
        try channel.writeInbound(get("/hls/\(id)/index.m3u8?token=\(listen)"))
        let heard = try #require(try answer(channel))
        #expect(String(buffer: heard.1).contains("3.m4s?token=\(listen)"))
        try channel.writeInbound(get("/hls/\(id)/init.mp4?token=\(listen)"))
        let initialization = try #require(try answer(channel))
        #expect(initialization.1 == HLSFile.initialization.body && initialization.0.headerFields[.cacheControl]?.contains("immutable") == true)
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)
    }

    /// Whatever the routes must answer (a refusal, an error, a first playlist's wait, another
    /// pair's session, another method or path) reaches them exactly as it came.
    @Test func whatTheRoutesMustAnswerIsPassedOn() async throws {
        let (id, token, _, answers) = try await playing()
        let other = tokens.issue()
        var elsewhere = answers
        elsewhere.playsHere = { $0 != id }
        let cases: [(HLSFastAnswers, HTTPRequestPart)] = [
            (answers, get("/hls/\(id)/3.m4s")),  // no token: 401
            (answers, get("/hls/\(id)/3.m4s?token=\(other.token)")),  // another session's: 403
            (answers, get("/hls/\(id)/3.m4s?token=\(tokens.listenToken(for: other.sessionID))")),
            (answers, get("/hls/\(id)/99.m4s?token=\(token)")),  // not kept: 404
            (answers, get("/hls/\(id)/x.m4s?token=\(token)")),
            (answers, get("/hls/\(other.sessionID)/index.m3u8?token=\(other.token)")),  // no segmenter yet: waits
            (answers, get("/hls/\(id)/3.m4s?token=\(token)", method: .head)),
            (answers, get("/hls/\(id)/3.m4s?token=\(token)", method: .post)),
            (answers, get("/hls/\(id)/3.m4s/more?token=\(token)")),
            (answers, get("/hls/%ZZ/3.m4s?token=\(token)")),
            (answers, get("/listen/\(id).ogg?token=\(token)")),
            (elsewhere, get("/hls/\(id)/3.m4s?token=\(token)")),  // another pair plays it: forwarded
        ]
        for (answers, request) in cases {
            let channel = try channel(answers)
            try channel.writeInbound(request)
            #expect(try channel.readInbound(as: HTTPRequestPart.self) == request, "\(request)")
            #expect(try channel.readOutbound(as: HTTPResponsePart.self) == nil, "\(request)")
        }
    }

    /// HTTP/1.1 answers in order: a request behind one the routes answer waits its turn there.
    @Test func aPipelinedRequestDoesNotOvertakeOneTheRoutesAnswer() async throws {
        let (id, token, _, answers) = try await playing()
        let channel = try channel(answers)
        let slow = get("/hls/\(id)/99.m4s?token=\(token)"), fast = get("/hls/\(id)/3.m4s?token=\(token)")
        try channel.writeInbound(slow)
        try channel.writeInbound(HTTPRequestPart.end(nil))
        try channel.writeInbound(fast)
        try channel.writeInbound(HTTPRequestPart.end(nil))
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == slow)
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == .end(nil))
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == fast, "passed on behind the slow one")
        #expect(try channel.readOutbound(as: HTTPResponsePart.self) == nil)
        // The routes answer both; the next request finds nothing ahead of it.
        for _ in 0..<2 {
            try channel.writeOutbound(HTTPResponsePart.head(HTTPResponse(status: .notFound)))
            try channel.writeOutbound(HTTPResponsePart.end(nil))
        }
        while try channel.readOutbound(as: HTTPResponsePart.self) != nil {}
        _ = try channel.readInbound(as: HTTPRequestPart.self)
        try channel.writeInbound(fast)
        #expect(try answer(channel)?.0.status == .ok)
    }

    /// A body sent with a request answered here is dropped with it; `Connection: close` is
    /// honoured, and nothing after it is read.
    @Test func aBodyIsDroppedAndConnectionCloseCloses() async throws {
        let (id, token, _, answers) = try await playing()
        let channel = try channel(answers)
        try channel.writeInbound(get("/hls/\(id)/3.m4s?token=\(token)"))
        try channel.writeInbound(HTTPRequestPart.body(ByteBuffer(string: "ignored")))
        try channel.writeInbound(HTTPRequestPart.end(nil))
        #expect(try answer(channel) != nil)
        #expect(try channel.readInbound(as: HTTPRequestPart.self) == nil)

        try channel.writeInbound(get("/hls/\(id)/2.m4s?token=\(token)", [.connection: "close"]))
        let closing = try #require(try answer(channel))
        #expect(closing.0.headerFields[.connection] == "close")
        channel.embeddedEventLoop.run()
        #expect(!channel.isActive)
    }
}
