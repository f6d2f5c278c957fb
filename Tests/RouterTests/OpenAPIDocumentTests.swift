// The Router's OpenAPI document (Sources/Router/Resources/Public/openapi.json, served at
// /openapi.json) is kept by hand; this proves it names exactly the routes the Router has, with
// the same methods. Whether the answers match its schemas is what schemathesis checks against
// the running Router.
import Foundation
import HTTPTypes
import Hummingbird
import Testing

@testable import TonearmRouter

@Suite struct OpenAPIDocumentTests {
    static let publicDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/Router/Resources/Public").path

    /// "METHOD /path/{param}" for every operation of the document.
    func documented() throws -> Set<String> {
        let data = try Data(contentsOf: URL(fileURLWithPath: Self.publicDirectory + "/openapi.json"))
        let document = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect(document["openapi"] as? String == "3.1.0")
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        var operations = Set<String>()
        for (path, item) in paths {
            for method in item.keys where ["get", "post", "put", "delete", "patch"].contains(method) {
                operations.insert("\(method.uppercased()) \(path)")
            }
        }
        return operations
    }

    /// The same for the routes the Router registers (`:name` written `{name}`).
    func registered() throws -> Set<String> {
        let router = RouterRoutesTests.makeRouter()
        return Set(
            router.routes.map { route in
                let path = route.path.description.split(separator: "/", omittingEmptySubsequences: false).map {
                    $0.hasPrefix(":") ? "{\($0.dropFirst())}" : String($0)
                }.joined(separator: "/")
                return "\(route.method.rawValue) \(path)"
            })
    }

    /// Registered on purpose but not an operation: any other command name is answered with
    /// the list of commands (404 `unknown_command`).
    static let undocumented: Set<String> = ["POST /api/sessions/{id}/{command}"]

    @Test func theDocumentNamesEveryRouteAndNoOther() throws {
        let documented = try documented()
        let registered = try registered().subtracting(Self.undocumented)
        #expect(registered.subtracting(documented).isEmpty, "routes missing from openapi.json: \(registered.subtracting(documented).sorted())")
        #expect(documented.subtracting(registered).isEmpty, "documented but not routed: \(documented.subtracting(registered).sorted())")
        // Not vacuous: the routes were read.
        #expect(registered.contains("POST /api/sessions/{id}/seek") && registered.contains("GET /ws"))
    }
}
