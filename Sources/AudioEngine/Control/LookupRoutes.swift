// `/resolve` and `/search`: what a URL or some words lead to, before anything plays.
import EngineAPI
import Foundation
import Hummingbird
import ServiceSupport

extension Resolution: ResponseEncodable {}
extension SearchResults: ResponseEncodable {}

extension ControlAPI {
    func addLookupRoutes(to router: Router<some RequestContext>) {
        router.get("/resolve") { request, _ -> Resolution in
            guard let url = request.uri.queryParameters["url"].map(String.init), !url.isEmpty else {
                throw APIError.badRequest("missing_url", "give the URL to resolve as ?url=")
            }
            return try await resolve(url)
        }
        router.get("/search") { request, _ -> SearchResults in
            guard let query = request.uri.queryParameters["q"].map(String.init),
                !query.trimmingCharacters(in: .whitespaces).isEmpty
            else { throw APIError.badRequest("missing_query", "give the search words as ?q=") }
            let limitText = request.uri.queryParameters["limit"].map(String.init) ?? "10"
            guard let limit = Int(limitText), (1...50).contains(limit) else {
                throw APIError.badRequest("invalid_limit", "\"limit\" is a number from 1 to 50, got \(limitText)")
            }
            return SearchResults(results: try await resolver.ytdlp.search(query, limit: limit, prefix: searchPrefix))
        }
    }

    /// Metadata for `url`: media-directory files and direct media describe themselves; pages
    /// (and playlists) go through yt-dlp.
    private func resolve(_ url: String) async throws -> Resolution {
        switch try resolver.plan(url) {
        case .page(let page):
            try await resolver.checkPage(page)
            return try await resolver.ytdlp.resolve(page)
        case .ready(let source):
            // Opening costs a thread (and a connection): through the same gate as yt-dlp.
            let info = try await resolver.ytdlp.gate.run { [network = resolver.network] in
                try await Self.offloaded { try Self.describe(source, network: network) }
            }
            return Resolution(
                url: url, title: info.title ?? source.displayName, durationMS: info.durationMS,
                isLive: info.durationMS == nil)
        }
    }

    /// Opens `source` far enough to say what it holds (blocks: call it off the cooperative pool).
    private static func describe(_ source: ResolvedSource, network: SourceNetwork) throws -> MediaInfo {
        do {
            guard source.isNetwork else { return try MediaDemuxer(path: source.location).info }
            var settings = ReadAheadInput.Configuration()
            settings.headers = source.headers
            let thread = SourceDemuxThread(url: source.location, network: network, configuration: settings)
            defer { thread.close() }
            return try thread.waitUntilOpen().info
        } catch {
            throw APIError.unplayable(error)
        }
    }

    /// Runs blocking work (FFmpeg opening a source) off Swift's cooperative pool.
    private static func offloaded<T>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }
}
