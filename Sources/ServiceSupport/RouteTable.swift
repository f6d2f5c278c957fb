// Which methods a path answers, from the routes a server registered: a request with another
// method gets 405 with `Allow` instead of 404 (RFC 9110 §15.5.6). Filled once the routes are in.
public import HTTPTypes
public import Hummingbird
import Synchronization

/// The registered routes' path patterns (`/api/sessions/:id/queue`) and their methods.
public final class RouteTable: Sendable {
    private let routes = Mutex<[(segments: [Substring], method: HTTPRequest.Method)]>([])

    public init() {}

    /// Replaces the table with `routes`: each a method and a path pattern whose captures (`{name}`,
    /// as Hummingbird describes them, or `:name`) and wildcards (`*`) match any one segment.
    public func load(_ routes: [(method: HTTPRequest.Method, path: String)]) {
        let parsed = routes.map { (segments: Self.segments($0.path), method: $0.method) }
        self.routes.withLock { $0 = parsed }
    }

    /// Replaces the table with the routes `router` has now (call it once they are all added).
    public func load(from router: Router<some RequestContext>) {
        load(router.routes.map { (method: $0.method, path: $0.path.description) })
    }

    /// The methods some route of `path` answers, in a stable order; empty when none matches.
    public func methods(for path: String) -> [HTTPRequest.Method] {
        let segments = Self.segments(path)
        let methods = routes.withLock { routes in
            routes.filter { route in
                route.segments.count == segments.count
                    && zip(route.segments, segments).allSatisfy { pattern, segment in
                        Self.isCapture(pattern) ? !segment.isEmpty : pattern == segment
                    }
            }.map(\.method)
        }
        return Array(Set(methods)).sorted { $0.rawValue < $1.rawValue }
    }

    private static func isCapture(_ pattern: Substring) -> Bool {
        pattern.hasPrefix(":") || pattern == "*" || (pattern.hasPrefix("{") && pattern.hasSuffix("}"))
    }

    private static func segments(_ path: String) -> [Substring] {
        path.split(separator: "/", omittingEmptySubsequences: true)
    }
}
