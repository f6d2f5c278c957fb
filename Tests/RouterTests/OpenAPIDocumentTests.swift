// The Router's OpenAPI document (Sources/Router/Resources/Public/openapi.json, served at
// /openapi.json) is kept by hand; this proves it names exactly the routes the Router has, with
// the same methods. Whether the answers match its schemas is what schemathesis checks against
// the running Router.
import Foundation
import HTTPTypes
import Hummingbird
import TestSupport
import Testing

@testable import TonearmRouter

@Suite struct OpenAPIDocumentTests {
    static let publicDirectory = OpenAPIOperations.repository(from: #filePath)
        .appendingPathComponent("Sources/Router/Resources/Public").path

    func documented() throws -> Set<String> {
        try OpenAPIOperations.documented(in: Self.publicDirectory + "/openapi.json")
    }

    func registered() -> Set<String> {
        Set(RouterRoutesTests.makeRouter().routes.map {
            OpenAPIOperations.operation(method: $0.method.rawValue, path: $0.path.description)
        })
    }

    /// Registered on purpose but not an operation: any other command name is answered with
    /// the list of commands (404 `unknown_command`).
    static let undocumented: Set<String> = ["POST /api/sessions/{id}/{command}"]

    @Test func theDocumentNamesEveryRouteAndNoOther() throws {
        let documented = try documented()
        let registered = registered().subtracting(Self.undocumented)
        #expect(registered.subtracting(documented).isEmpty, "routes missing from openapi.json: \(registered.subtracting(documented).sorted())")
        #expect(documented.subtracting(registered).isEmpty, "documented but not routed: \(documented.subtracting(registered).sorted())")
        // Not vacuous: the routes were read.
        #expect(registered.contains("POST /api/sessions/{id}/seek") && registered.contains("GET /ws"))
    }
}
