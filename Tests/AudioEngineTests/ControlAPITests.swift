import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOPosix
import TestSupport
import Testing
import WireProtocol

@testable import AudioEngine

@Suite struct ControlAPITests {
    func withApp(_ body: @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        let directory = try TemporaryDirectory()
        try MediaFixture.tone(440, seconds: 1, into: directory.path)
        let workers = NIOThreadPool(numberOfThreads: 1)
        workers.start()
        let logger = Logger(label: "test")
        let manager = SessionManager(
            library: MediaLibrary(directory: directory.path), configuration: .init(), workers: workers, logger: logger)
        let router = Router()
        ControlAPI(manager: manager, socket: AudioSocketServer(path: directory.file("s.sock"), logger: logger))
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
    ])
    func refusedRequestsAreJSONErrors(uri: String, body: String, status: Int, code: String) async throws {
        try await withApp { client in
            try await client.execute(uri: uri, method: .post, body: ByteBuffer(string: body)) { response in
                #expect(response.status.code == status)
                let error = try Self.error(response)
                #expect(error.code == code)
                #expect(!error.message.isEmpty)
            }
        }
    }

    @Test func healthReportsSessionsAndFrames() async throws {
        try await withApp { client in
            try await client.execute(uri: "/health", method: .get) { response in
                #expect(response.status == .ok)
                let text = String(buffer: response.body)
                #expect(text.contains(#""status":"ok""#))
                #expect(text.contains(#""sessions":0"#))
            }
        }
    }
}
