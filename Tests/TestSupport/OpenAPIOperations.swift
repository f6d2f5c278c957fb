// The two servers' OpenAPI documents are kept by hand; their tests compare the operations a
// document names with the routes the server registers, both written "METHOD /path/{param}".
import Foundation

public enum OpenAPIOperations {
    public struct DocumentError: Error, CustomStringConvertible {
        public let description: String
    }

    /// Every operation of the OpenAPI 3.1 document at `file`.
    public static func documented(in file: String) throws -> Set<String> {
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        guard let document = try JSONSerialization.jsonObject(with: data) as? [String: Any],
            document["openapi"] as? String == "3.1.0", let paths = document["paths"] as? [String: [String: Any]]
        else { throw DocumentError(description: "\(file) is not an OpenAPI 3.1.0 document with paths") }
        var operations = Set<String>()
        for (path, item) in paths {
            for method in item.keys where ["get", "post", "put", "delete", "patch"].contains(method) {
                operations.insert("\(method.uppercased()) \(path)")
            }
        }
        return operations
    }

    /// A registered route in the document's form: `:name` path segments written `{name}`.
    public static func operation(method: String, path: String) -> String {
        let segments = path.split(separator: "/", omittingEmptySubsequences: false).map {
            $0.hasPrefix(":") ? "{\($0.dropFirst())}" : String($0)
        }
        return "\(method) \(segments.joined(separator: "/"))"
    }

    /// The repository's root, from a test file's `#filePath` (Tests/<target>/<file>.swift).
    public static func repository(from testFile: String) -> URL {
        URL(fileURLWithPath: testFile).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }
}
