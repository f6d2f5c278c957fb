import EngineAPI
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import ServiceSupport
import TestSupport
import Synchronization
import Testing
import WireProtocol

@testable import AudioEngine

@Suite struct ControlAPITests {
    func withApp(
        maxSessions: Int = 3, _ body: @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let directory = try TemporaryDirectory()
        try MediaFixture.tone(440, seconds: 1, into: directory.path)
        let workers = NIOThreadPool(numberOfThreads: 1)
        workers.start()
        let logger = Logger(label: "test")
        let resolver = SourceResolver(
            library: MediaLibrary(directory: directory.path), network: try SourceNetwork(policy: NetworkPolicy()), ytdlp: YTDLP())
        var configuration = PlaybackConfiguration()
        configuration.maxSessions = maxSessions
        let manager = SessionManager(resolver: resolver, configuration: configuration, workers: workers, logger: logger)
        let router = Router(context: EngineRequestContext.self)
        ControlAPI(manager: manager, socket: AudioSocketServer(path: directory.file("s.sock"), logger: logger), resolver: resolver)
            .addRoutes(to: router)
        try await Application(router: router).test(.router, body)
        manager.stopAll()
        try await workers.shutdownGracefully()
    }

    static func error(_ response: TestResponse) throws -> ErrorBody {
        try JSONDecoder().decode(ErrorBody.self, from: Data(response.body.readableBytesView))
    }

    @Test func playAnswers202WithThePlay() async throws {
        try await withApp { client in
            try await client.execute(uri: "/session/guild-1/play", method: .post, body: ByteBuffer(string: #"{"url":"tone-440.mp3"}"#)) {
                response in
                #expect(response.status == .accepted)
                let started = try JSONDecoder().decode(PlayStarted.self, from: Data(response.body.readableBytesView))
                #expect(started.sessionID.description == "guild-1")
                #expect(started.playID >= 1)
            }
            try await client.execute(uri: "/session/guild-1/stop", method: .post) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains(#""stopped":true"#))
            }
            try await client.execute(uri: "/session/guild-1/stop", method: .post) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains(#""stopped":false"#))
            }
        }
    }

    @Test(arguments: [
        ("/session/\(String(repeating: "1", count: 25))/play", #"{"url":"tone-440.mp3"}"#, 400, "invalid_session_id"),
        ("/session/a%20b/play", #"{"url":"tone-440.mp3"}"#, 400, "invalid_session_id"),
        ("/session/a/play", "{not json", 400, "invalid_json"),
        ("/session/a/play", "", 400, "invalid_json"),
        ("/session/a/play", "{}", 400, "missing_url"),
        ("/session/a/play", #"{"url":"../../etc/passwd"}"#, 422, "outside_media_dir"),
        ("/session/a/play", #"{"url":"file:///etc/passwd"}"#, 422, "unsupported_scheme"),
        ("/session/a/play", #"{"url":"missing.mp3"}"#, 422, "source_not_found"),
        ("/nowhere", "", 404, "not_found"),
        ("/sessions", "", 405, "method_not_allowed"),
        ("/session/a", "", 405, "method_not_allowed"),
        ("/session/a/end_at", #"{"position_ms":0}"#, 400, "invalid_position"),
        ("/session/a/end_at", #"{"position_ms":-20}"#, 400, "invalid_position"),
        ("/session/a/end_at", #"{"position_ms":"soon"}"#, 400, "invalid_json"),
        ("/session/nobody/end_at", #"{"position_ms":3000}"#, 404, "session_not_found"),
    ])
    func refusedRequestsAreJSONErrors(uri: String, body: String, status: Int, code: String) async throws {
        try await refused(uri: uri, body: body, status: status, code: code)
    }

    /// A number no 64-bit field holds is named in the refusal (Foundation's decoder would call
    /// the whole body invalid JSON).
    @Test func aNumberBeyond64BitsIsNamed() async throws {
        let message = try await refused(
            uri: "/session/a/pause", body: #"{"play_id": 9886029655117829391777792}"#, status: 400, code: "invalid_json")
        #expect(message == #""play_id" is out of range"#)
    }

    @discardableResult
    func refused(uri: String, body: String, status: Int, code: String) async throws -> String {
        let message = Mutex("")
        try await withApp { client in
            try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: body)) { response in
                #expect(response.status.code == status)
                let error = try Self.error(response)
                #expect(error.code == code)
                #expect(!error.message.isEmpty)
                message.withLock { $0 = error.message }
            }
        }
        return message.withLock { $0 }
    }

    @Test func healthReportsSessionsAndFrames() async throws {
        try await withApp { client in
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .ok)
                let text = String(buffer: response.body)
                #expect(text.contains(#""status":"ok""#))
                #expect(text.contains(#""playing":0"#))
                #expect(text.contains(#""streaming":0"#))
            }
        }
    }
}

@Suite struct ControlAPIStateTests {
    @Test func controlsOfAPlayingSessionAndTheirRefusals() async throws {
        try await ControlAPITests().withApp { client in
            let play = ByteBuffer(string: #"{"url":"tone-440.mp3"}"#)
            try await client.execute(uri: "/session/x/pause", method: .post) { #expect($0.status == .notFound) }
            try await client.execute(uri: "/session/x", method: .get) { response in
                #expect(response.status == .notFound)
                let body = try ControlAPITests.error(response)
                #expect(body.code == "session_not_found")
            }
            try await client.execute(uri: "/session/x/play", method: .post, body: play) { #expect($0.status == .accepted) }
            // This app runs no pacer, so the play stays extracting (the pacer moves it to
            // streaming): a seek is refused with 409 until it plays. (The end-to-end tests seek
            // in a playing session.)
            try await client.execute(uri: "/session/x", method: .get) { response in
                let info = try JSONDecoder().decode(SessionInfo.self, from: Data(response.body.readableBytesView))
                #expect(info.state == .extracting)
            }
            try await client.execute(uri: "/session/x/seek", method: .post, body: ByteBuffer(string: #"{"position_ms":10}"#)) {
                response in
                #expect(response.status == .conflict)
                let body = try ControlAPITests.error(response)
                #expect(body.code == "invalid_state")
            }
            try await client.execute(uri: "/session/x/volume", method: .post, body: ByteBuffer(string: #"{"volume":1001}"#)) {
                response in
                #expect(response.status == .badRequest)
                let body = try ControlAPITests.error(response)
                #expect(body.code == "invalid_volume")
            }
            try await client.execute(uri: "/session/x/volume", method: .post, body: ByteBuffer(string: #"{"volume":250}"#)) {
                response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body).contains(#""volume":250"#))
            }
            // Filters: refused in words when they cannot be applied, echoed when set, gone when cleared.
            for (body, words) in [
                (#"{"equalizer":[{"band":15,"gain":0.1}]}"#, "band 15 does not exist"),
                (#"{"equalizer":[{"band":3,"gain":1.5}]}"#, "outside -0.25"),
            ] {
                try await client.execute(uri: "/session/x/filters", method: .post, body: ByteBuffer(string: body)) {
                    response in
                    #expect(response.status == .badRequest)
                    let error = try ControlAPITests.error(response)
                    #expect(error.code == "invalid_filters" && error.message.contains(words), "\(error.message)")
                }
            }
            // A wrong type inside a filter is `invalid_filters` naming it, as the Router says it,
            // on the filters call and inside a play.
            for (uri, body, words) in [
                ("/session/x/filters", #"{"equalizer":[{"band":"low","gain":0}]}"#, "equalizer.0.band"),
                ("/session/x/filters", #"{"timescale":{"speed":"fast"}}"#, "timescale.speed"),
                ("/session/y/play", #"{"url":"a.mp3","filters":{"tremolo":5}}"#, "filters.tremolo"),
            ] {
                try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: body)) { response in
                    #expect(response.status == .badRequest)
                    let error = try ControlAPITests.error(response)
                    #expect(error.code == "invalid_filters" && error.message.contains(words), "\(body): \(error.message)")
                }
            }
            try await client.execute(
                uri: "/session/x/filters", method: .post, body: ByteBuffer(string: #"{"equalizer":[{"band":8,"gain":0.25}]}"#)
            ) { response in
                #expect(response.status == .ok)
                let info = try JSONDecoder().decode(SessionInfo.self, from: Data(response.body.readableBytesView))
                #expect(info.filters == Filters(equalizer: [EqualizerBand(band: 8, gain: 0.25)]))
            }
            try await client.execute(uri: "/session/x/filters", method: .post, body: ByteBuffer(string: "{}")) { response in
                #expect(response.status == .ok)
                #expect(!String(buffer: response.body).contains("filters"))
            }
            // Loudness normalisation: on for a new session, off when asked, refused without a boolean.
            try await client.execute(uri: "/session/x", method: .get) { response in
                let info = try JSONDecoder().decode(SessionInfo.self, from: Data(response.body.readableBytesView))
                #expect(info.normalize)
            }
            for (body, code) in [("{}", "invalid_normalize"), (#"{"enabled":"no"}"#, "invalid_json")] {
                try await client.execute(uri: "/session/x/normalize", method: .post, body: ByteBuffer(string: body)) {
                    response in
                    #expect(response.status == .badRequest)
                    let error = try ControlAPITests.error(response)
                    #expect(error.code == code, "\(body): \(error.message)")
                }
            }
            try await client.execute(uri: "/session/x/normalize", method: .post, body: ByteBuffer(string: #"{"enabled":false}"#)) {
                response in
                let info = try JSONDecoder().decode(SessionInfo.self, from: Data(response.body.readableBytesView))
                #expect(!info.normalize)
            }
            try await client.execute(
                uri: "/session/y/play", method: .post, body: ByteBuffer(string: #"{"url":"tone-440.mp3","normalize":false}"#)
            ) { #expect($0.status == .accepted) }
            try await client.execute(uri: "/session/y", method: .get) { response in
                let info = try JSONDecoder().decode(SessionInfo.self, from: Data(response.body.readableBytesView))
                #expect(!info.normalize)
            }
            try await client.execute(uri: "/session/nobody/filters", method: .post, body: ByteBuffer(string: "{}")) {
                #expect($0.status == .notFound)
            }
            try await client.execute(uri: "/sessions", method: .get) { response in
                #expect(String(buffer: response.body).contains(#""session_id":"x""#))
            }
            // Stopped, there is nothing to seek in: 409.
            try await client.execute(uri: "/session/x/stop", method: .post) { #expect($0.status == .ok) }
            try await client.execute(uri: "/session/x/seek", method: .post, body: ByteBuffer(string: #"{"position_ms":10}"#)) {
                response in
                #expect(response.status == .conflict)
                let body = try ControlAPITests.error(response)
                #expect(body.code == "invalid_state")
            }
        }
    }

    @Test func theSixtyFirstSessionAnswers503() async throws {
        try await ControlAPITests().withApp(maxSessions: PlaybackConfiguration().maxSessions) { client in
            let play = ByteBuffer(string: #"{"url":"tone-440.mp3"}"#)
            #expect(PlaybackConfiguration().maxSessions == 60)
            for id in (1...58).map({ "s\($0)" }) + ["a", "b"] {
                try await client.execute(uri: "/session/\(id)/play", method: .post, body: play) { #expect($0.status == .accepted) }
            }
            try await client.execute(uri: "/session/d/play", method: .post, body: play) { response in
                #expect(response.status == .serviceUnavailable)
                let body = try ControlAPITests.error(response)
                #expect(body.code == "pool_exhausted")
            }
            // Replacing a play on a session that already counts is still allowed.
            try await client.execute(uri: "/session/a/play", method: .post, body: play) { #expect($0.status == .accepted) }
            try await client.execute(uri: "/session/b/stop", method: .post) { #expect($0.status == .ok) }
            try await client.execute(uri: "/session/d/play", method: .post, body: play) { #expect($0.status == .accepted) }
        }
    }

    @Test(arguments: ["http://127.0.0.1/a.mp3", "http://localhost/a.mp3", "http://10.1.2.3/a.mp3", "http://[::1]/a.mp3", "http://169.254.169.254/latest"])
    func privateAddressesAreRefusedByDefault(url: String) async throws {
        try await ControlAPITests().withApp { client in
            try await client.execute(uri: "/session/p/play", method: .post, body: ByteBuffer(string: #"{"url":"\#(url)"}"#)) { response in
                #expect(response.status == .unprocessableContent)
                let body = try ControlAPITests.error(response)
                #expect(body.code == "private_address")
            }
        }
    }
}
