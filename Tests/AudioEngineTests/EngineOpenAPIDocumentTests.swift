// The engine's OpenAPI document (docs/engine-openapi.json) is kept by hand; this proves it names
// exactly the routes the engine registers. Whether the answers match its schemas is what
// schemathesis checks against the running engine (Tests/API/run.sh).
import Foundation
import Hummingbird
import Logging
import NIOPosix
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct EngineOpenAPIDocumentTests {
    @Test func theDocumentNamesEveryRouteAndNoOther() throws {
        let file = OpenAPIOperations.repository(from: #filePath).appendingPathComponent("docs/engine-openapi.json").path
        let documented = try OpenAPIOperations.documented(in: file)
        let logger = Logger(label: "test")
        let resolver = SourceResolver(
            library: MediaLibrary(directory: "/nonexistent"), network: try SourceNetwork(policy: NetworkPolicy()), ytdlp: YTDLP())
        let manager = SessionManager(
            resolver: resolver, configuration: PlaybackConfiguration(), workers: NIOThreadPool.singleton, logger: logger)
        let router = Router(context: EngineRequestContext.self)
        ControlAPI(manager: manager, socket: AudioSocketServer(path: "/nonexistent/s.sock", logger: logger), resolver: resolver)
            .addRoutes(to: router)
        let registered = Set(router.routes.map {
            OpenAPIOperations.operation(method: $0.method.rawValue, path: $0.path.description)
        })
        #expect(registered.subtracting(documented).isEmpty, "routes missing from the document: \(registered.subtracting(documented).sorted())")
        #expect(documented.subtracting(registered).isEmpty, "documented but not routed: \(documented.subtracting(registered).sorted())")
        #expect(registered.contains("POST /session/{id}/seek") && registered.contains("GET /health"))
    }
}
