// Decides what a play's `url` is and how to open it: a media-directory file, a direct http(s)
// media URL (read ahead, reconnecting), or a page that yt-dlp turns into a stream URL. Describes
// a URL for `/resolve` too: a file at once, a network source through a gate of its own and a
// page through yt-dlp's, each at most one per session at a time and within the deadline.
import EngineAPI
import Foundation
import ServiceSupport
import Synchronization

/// Turns a play request's `url` into a `ResolvedSource`.
package struct SourceResolver: Sendable {
    let library: MediaLibrary
    /// How network sources are fetched, and the policy they are fetched under.
    let network: SourceNetwork
    let ytdlp: YTDLP
    /// Network sources opened to describe them: a thread and a connection each, much cheaper
    /// than a yt-dlp process, so more at once, and never behind yt-dlp's queue.
    let opens: ConcurrencyGate
    let cache = ResolutionCache()

    var policy: NetworkPolicy { network.policy }

    package init(
        library: MediaLibrary, network: SourceNetwork, ytdlp: YTDLP,
        openLimits: ConcurrencyGate.Limits = .init(limit: 16, queueLimit: 32)
    ) {
        self.library = library
        self.network = network
        self.ytdlp = ytdlp
        opens = ConcurrencyGate("sources being opened to describe them", limits: openLimits)
    }

    /// How a source will be resolved, decided without waiting on anything slow.
    enum Plan: Sendable {
        case ready(ResolvedSource)
        case page(String)
    }

    /// File extensions libavformat opens directly; any other http(s) URL goes through yt-dlp.
    static let mediaExtensions: Set<String> = [
        "mp3", "ogg", "oga", "opus", "webm", "weba", "m4a", "mp4", "aac", "flac", "wav", "mka", "mkv", "m3u8", "wma",
    ]

    /// Validates `url` and says how it resolves. Throws 400/422 for what can never play.
    func plan(_ url: String) throws(APIError) -> Plan {
        let trimmed = url.trimmingCharacters(in: .whitespaces)
        guard let scheme = Self.scheme(of: trimmed) else { return .ready(try library.resolve(trimmed)) }
        guard scheme == "http" || scheme == "https" else {
            throw .unprocessable(
                "unsupported_scheme",
                "the \(scheme): scheme is not accepted; give an http(s) URL or a file name inside the media directory")
        }
        guard let components = URLComponents(string: trimmed), let host = components.host, !host.isEmpty else {
            throw .badRequest("invalid_url", "\"\(trimmed)\" is not a valid URL")
        }
        try policy.checkLiteral(host: host)
        let ext = (components.path as NSString).pathExtension.lowercased()
        if Self.mediaExtensions.contains(ext) {
            return .ready(Self.network(trimmed, headers: [:], name: (components.path as NSString).lastPathComponent))
        }
        return .page(trimmed)
    }

    /// What `url` holds (`GET /resolve`), for `owner` (a session): a media-directory file
    /// describes itself at once, never waiting for a place; direct media is opened far enough to
    /// say; pages (and playlists) go through yt-dlp.
    func describe(_ url: String, owner: String?) async throws(APIError) -> Resolution {
        let source: ResolvedSource
        switch try plan(url) {
        case .page(let page):
            try await checkPage(page)
            return try await ytdlp.resolve(page, owner: owner)
        case .ready(let ready):
            source = ready
        }
        let info: MediaInfo
        do {
            if source.isNetwork {
                info = try await opens.run(owner: owner) { [network] in try await Self.open(source, network: network) }
            } else {
                info = try await Self.offloaded { try MediaDemuxer(path: source.location).info }
            }
        } catch let error as APIError {
            throw error
        } catch let error as MediaError {
            throw .unplayable(error)
        } catch {
            throw .cancelled
        }
        return Resolution(
            url: url, title: info.title ?? source.displayName, durationMS: info.durationMS, isLive: info.durationMS == nil)
    }

    /// Opens a network source far enough to say what it holds, within the open deadline; a
    /// cancelled caller closes it at once.
    private static func open(_ source: ResolvedSource, network: SourceNetwork) async throws(MediaError) -> MediaInfo {
        var settings = ReadAheadInput.Configuration()
        settings.headers = source.headers
        let thread = SourceDemuxThread(url: source.location, network: network, configuration: settings)
        defer { thread.close() }
        return try await thread.opened().info
    }

    /// Runs blocking work (FFmpeg opening a file) off Swift's cooperative pool.
    private static func offloaded<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Resolves a page URL through yt-dlp for `owner` (cached until the stream URL expires). The
    /// page's host is looked up under the policy first: yt-dlp fetches it itself.
    func resolvePage(_ url: String, owner: String?) async throws(APIError) -> ResolvedSource {
        let stream: YTDLP.Stream
        if let cached = cache.get(url) {
            stream = cached
        } else {
            try await checkPage(url)
            stream = try await ytdlp.stream(url, owner: owner)
            cache.put(url, stream)
        }
        if let host = URLComponents(string: stream.url)?.host { try policy.checkLiteral(host: host) }
        var source = Self.network(stream.url, headers: stream.headers, name: stream.metadata.title ?? url)
        source.metadata = stream.metadata
        source.expiresAt = stream.expiresAt
        source.pageURL = url
        return source
    }

    /// A page's host looked up under the policy before yt-dlp is asked to fetch it.
    func checkPage(_ url: String) async throws(APIError) {
        if let host = URLComponents(string: url)?.host { try await policy.check(host: host) }
    }

    static func network(_ url: String, headers: [String: String], name: String) -> ResolvedSource {
        ResolvedSource(location: url, displayName: name, isNetwork: true, headers: headers)
    }

    /// The lowercased scheme of a URL-like string, or nil for a plain path.
    static func scheme(of text: String) -> String? {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let candidate = text[..<colon]
        guard candidate.count > 1, candidate.first!.isLetter,
            candidate.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "+" || $0 == "-" || $0 == "." })
        else { return nil }
        return candidate.lowercased()
    }
}

/// yt-dlp resolutions by page URL, kept until their stream URL expires (or an hour).
final class ResolutionCache: Sendable {
    private let entries = Mutex<[String: (YTDLP.Stream, Date)]>([:])
    static let defaultLifetime: TimeInterval = 3_600
    /// Resolutions expiring within this margin are treated as expired.
    static let margin: TimeInterval = 60

    func get(_ url: String, now: Date = Date()) -> YTDLP.Stream? {
        entries.withLock { entries in
            guard let (stream, expiry) = entries[url] else { return nil }
            if expiry.timeIntervalSince(now) < Self.margin {
                entries[url] = nil
                return nil
            }
            return stream
        }
    }

    func put(_ url: String, _ stream: YTDLP.Stream, now: Date = Date()) {
        let expiry = stream.expiresAt ?? now.addingTimeInterval(Self.defaultLifetime)
        entries.withLock { entries in
            if entries.count > 1_000 { entries.removeAll() }
            entries[url] = (stream, expiry)
        }
    }
}
