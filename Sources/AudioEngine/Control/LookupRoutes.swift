// `/resolve` and `/search`: what a URL or some words lead to, before anything plays. Both are
// called off when the Router's request goes away (`untilClientLeaves`).
import EngineAPI
import Foundation
import Hummingbird
import ServiceSupport
import WireProtocol

extension Resolution: ResponseEncodable {}
extension SearchResults: ResponseEncodable {}

extension ControlAPI {
    func addLookupRoutes(to router: Router<EngineRequestContext>) {
        router.get("/resolve") { request, context -> Resolution in
            guard let url = request.uri.queryParameters["url"].map(String.init), !url.isEmpty else {
                throw APIError.badRequest("missing_url", "give the URL to resolve as ?url=")
            }
            let owner = try Self.owner(request)
            return try await untilClientLeaves(context.channel) { [resolver] () async throws(APIError) in
                try await resolver.describe(url, owner: owner)
            }
        }
        router.get("/search") { request, context -> SearchResults in
            guard let query = request.uri.queryParameters["q"].map(String.init),
                !query.trimmingCharacters(in: .whitespaces).isEmpty
            else { throw APIError.badRequest("missing_query", "give the search words as ?q=") }
            let limitText = request.uri.queryParameters["limit"].map(String.init) ?? "10"
            guard let limit = Int(limitText), (1...50).contains(limit) else {
                throw APIError.badRequest("invalid_limit", "\"limit\" is a number from 1 to 50, got \(limitText)")
            }
            // `source`: one of yt-dlp's search prefixes Lavalink clients name (its `ytsearch:`,
            // `ytmsearch:`, `scsearch:`); the configured one when absent.
            let prefix = request.uri.queryParameters["source"].map(String.init) ?? searchPrefix
            guard Self.searchSources.contains(prefix) || prefix == searchPrefix else {
                throw APIError.badRequest("invalid_source", "\"source\" is one of \(Self.searchSources.sorted().joined(separator: ", "))")
            }
            let owner = try Self.owner(request)
            return try await untilClientLeaves(context.channel) { [resolver] () async throws(APIError) in
                SearchResults(results: try await resolver.ytdlp.search(query, limit: limit, prefix: prefix, owner: owner))
            }
        }
    }

    static let searchSources: Set<String> = ["ytsearch", "ytmsearch", "scsearch"]

    /// The session a lookup is for (`?session=`): it holds at most one place at a time.
    private static func owner(_ request: Request) throws(APIError) -> String? {
        guard let raw = request.uri.queryParameters["session"].map(String.init) else { return nil }
        do {
            return try SessionID(raw).description
        } catch {
            throw .badRequest("invalid_session_id", error.description)
        }
    }
}
