// yt-dlp as a subprocess: page URL → stream URL, its HTTP headers and metadata; playlists; search.
// Runs asynchronously (never on the encoding workers), at most one at a time per session, within
// a deadline (TONEARM_RESOLVE_TIMEOUT), and is killed when the task that waits for it is cancelled.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport

/// Calls the yt-dlp executable.
package struct YTDLP: Sendable {
    var executable = "yt-dlp"
    var timeout: Duration = .seconds(15)
    /// At most this many yt-dlp processes at once, one per session; a bounded queue waits for a place.
    let gate: ConcurrencyGate
    /// The engine's `PolicyProxy`, through which yt-dlp makes every request (nil: directly, in
    /// unit tests that run a stand-in).
    let proxy: String?

    package init(
        executable: String = "yt-dlp", timeout: Duration = .seconds(15), limits: ConcurrencyGate.Limits = .init(),
        proxy: String? = nil
    ) {
        self.executable = executable
        self.timeout = timeout
        self.proxy = proxy
        gate = ConcurrencyGate("yt-dlp runs", limits: limits)
    }

    /// One resolved stream.
    struct Stream: Sendable, Equatable {
        var url: String
        var headers: [String: String]
        var metadata: TrackMetadata
        var expiresAt: Date?
    }

    /// The best audio stream of `url`, resolved for `owner` (a session).
    func stream(_ url: String, owner: String?) async throws(APIError) -> Stream {
        let json = try await run(["--dump-single-json", "--no-playlist", "--format", "bestaudio/best", url], owner: owner)
        guard let streamURL = json["url"] as? String else {
            throw .unprocessable("no_stream", "yt-dlp found no playable stream at \(url)")
        }
        let headers = (json["http_headers"] as? [String: String]) ?? [:]
        return Stream(
            url: streamURL, headers: headers, metadata: Self.metadata(json, fallbackURL: url),
            expiresAt: Self.expiry(of: streamURL))
    }

    /// Metadata of `url`, with playlist entries (not resolved to streams).
    func resolve(_ url: String, owner: String?) async throws(APIError) -> Resolution {
        let json = try await run(["--dump-single-json", "--flat-playlist", url], owner: owner)
        return Self.resolution(json, url: url)
    }

    /// Search results for `query` (`ytsearchN:` by default).
    func search(_ query: String, limit: Int, prefix: String, owner: String?) async throws(APIError) -> [TrackMetadata] {
        let json = try await run(["--dump-single-json", "--flat-playlist", "\(prefix)\(limit):\(query)"], owner: owner)
        return Self.resolution(json, url: query).entries
    }

    static func resolution(_ json: [String: Any], url: String) -> Resolution {
        let entries = (json["entries"] as? [[String: Any]]) ?? []
        return Resolution(
            url: (json["webpage_url"] as? String) ?? url, title: json["title"] as? String,
            durationMS: milliseconds(json["duration"]),
            thumbnail: json["thumbnail"] as? String, isLive: json["is_live"] as? Bool ?? false,
            isPlaylist: json["_type"] as? String == "playlist",
            entries: entries.map { metadata($0, fallbackURL: url) })
    }

    static func metadata(_ json: [String: Any], fallbackURL: String) -> TrackMetadata {
        let thumbnails = json["thumbnails"] as? [[String: Any]]
        return TrackMetadata(
            url: (json["webpage_url"] as? String) ?? (json["url"] as? String) ?? fallbackURL,
            title: json["title"] as? String,
            durationMS: milliseconds(json["duration"]),
            thumbnail: (json["thumbnail"] as? String) ?? (thumbnails?.last?["url"] as? String),
            isLive: json["is_live"] as? Bool ?? false,
            uploader: json["uploader"] as? String)
    }

    /// A duration in seconds from yt-dlp's JSON (a page's own claim: any number, NaN, a string)
    /// in ms, or nil unless it is a finite number from 0 to `MediaTime.maxMS`.
    static func milliseconds(_ value: Any?) -> Int64? {
        guard let seconds = value as? Double, seconds.isFinite, seconds >= 0,
            seconds * 1000 <= Double(MediaTime.maxMS)
        else { return nil }
        return Int64(seconds * 1000)
    }

    /// Signed stream URLs (YouTube's among them) carry `expire=<unix time>`.
    static func expiry(of url: String) -> Date? {
        guard let components = URLComponents(string: url),
            let value = components.queryItems?.first(where: { $0.name == "expire" })?.value,
            let seconds = TimeInterval(value)
        else { return nil }
        return Date(timeIntervalSince1970: seconds)
    }

    private func run(_ arguments: [String], owner: String?) async throws(APIError) -> [String: Any] {
        let output: ProcessOutput
        do {
            let proxying = proxy.map { ["--proxy", $0] } ?? []
            output = try await gate.run(owner: owner) { [executable, timeout] in
                try await ProcessOutput.run(
                    executable, arguments: ["--no-warnings", "--no-progress", "--ignore-config"] + proxying + arguments,
                    timeout: timeout)
            }
        } catch let error as APIError {
            throw error
        } catch is ProcessOutput.Timeout {
            throw APIError(
                status: .gatewayTimeout, code: "source_timeout",
                message: "yt-dlp did not finish within \(timeout.components.seconds) s (TONEARM_RESOLVE_TIMEOUT); the page did not answer in time")
        } catch is CancellationError {
            throw .cancelled
        } catch {
            throw .init(
                status: .serviceUnavailable, code: "resolver_unavailable",
                message: "yt-dlp could not be run (\(executable)): \(error)")
        }
        guard output.status == 0 else {
            if output.standardError.contains(PolicyProxy.refusalPhrase) {
                throw .unprocessable(
                    "private_address",
                    "the page led yt-dlp to a loopback, private or link-local address, which is refused (only public "
                        + "hosts are accepted; TONEARM_ALLOW_PRIVATE_SOURCES=1 or TONEARM_ALLOWED_SOURCE_NETWORKS allow others)")
            }
            let reason = output.standardError.split(separator: "\n").last { $0.contains("ERROR") }
                .map { String($0).replacingOccurrences(of: "ERROR: ", with: "") } ?? "exit status \(output.status)"
            throw .unprocessable("unresolvable", "yt-dlp cannot play this URL: \(reason)")
        }
        guard let json = try? JSONSerialization.jsonObject(with: output.standardOutput) as? [String: Any] else {
            throw .unprocessable("unresolvable", "yt-dlp returned no usable description of the URL")
        }
        return json
    }
}
