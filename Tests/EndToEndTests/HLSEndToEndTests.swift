// `/hls/{id}/index.m3u8` on the real binaries: ffmpeg plays the session from its live playlist
// and the test hears its tone; a track change is in the playlist as a date range within a segment
// of when it is heard; the caching headers a CDN needs; a session gone silent ends its playlist.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct HLSEndToEndTests {
    struct Fetched {
        var status: Int
        var headers: HTTPHeaders
        var body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    static func fetch(_ url: String) async throws -> Fetched {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(15))
        let body = try await response.body.collect(upTo: 8 << 20)
        return Fetched(status: Int(response.status.code), headers: response.headers, body: Data(body.readableBytesView))
    }

    static func date(_ text: Substring) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.date(from: String(text))
    }

    @Test func ffmpegPlaysTheSessionAndTheTitleChangesWithTheTrack() async throws {
        let cluster = try TonearmCluster(tones: [440, 880], seconds: 30)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let session = "radio"
        let base = cluster.routerURL + "/hls/\(session)/"
        let token = "token=\(TonearmCluster.botToken)"
        #expect(try await Self.fetch(base + "index.m3u8").status == 401, "a token is needed, as for /listen")
        let bot = SessionListener(session: session, routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bot.isConnected })
        #expect(try await cluster.play(session, "tone-440.mp3").status == 202)
        #expect(await bot.hears(440))

        // The first request starts the session's segmenter and waits for its first segment.
        let first = try await Self.fetch(base + "index.m3u8?" + token)
        #expect(first.status == 200 && first.headers.first(name: "content-type") == "application/vnd.apple.mpegurl")
        #expect(first.headers.first(name: "cache-control") == "public, max-age=1")
        #expect(first.text.contains(#"#EXT-X-MAP:URI="init.mp4?\#(token)""#) && first.text.contains("1.m4s?" + token), "\(first.text)")
        let initial = try await Self.fetch(base + "init.mp4?" + token)
        #expect(initial.headers.first(name: "cache-control") == "public, max-age=31536000, immutable")
        let segment = try await Self.fetch(base + "1.m4s?" + token)
        #expect(segment.status == 200 && segment.headers.first(name: "cache-control") == "public, max-age=60")
        #expect(try await Self.fetch(base + "999.m4s?" + token).status == 404)

        // ffmpeg plays 4 s of the live stream: the tone.
        let raw = cluster.directory.file("hls.f32")
        _ = try runTool("ffmpeg", [
            "-nostdin", "-loglevel", "error", "-y", "-i", base + "index.m3u8?" + token, "-t", "4", "-f", "f32le", "-ac", "2",
            "-ar", "48000", raw,
        ])
        let samples = try Data(contentsOf: URL(fileURLWithPath: raw)).withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        #expect(samples.count >= 2 * 48_000 * 3, "ffmpeg decoded \(samples.count / 96_000) s")
        #expect(abs(Spectrum.dominantFrequency(Spectrum.left(Array(samples.suffix(96_000)))) - 440) < 10)

        // A new track: its date range starts within a segment (2 s) of when the bot heard its `ready`.
        #expect(try await cluster.play(session, "tone-880.mp3").status == 202)
        #expect(await bot.hears(880))
        // When the bot got the new track's `ready` (just before its first packet), on the wall clock.
        let ready = try #require(bot.all.last { entry in
            if case .text(let text) = entry.message { return text.contains(#""type":"ready""#) && text.contains("tone-880") }
            return false
        })
        let readyAt = Date().addingTimeInterval(-Double((ContinuousClock.now - ready.at).components.seconds)
            - Double((ContinuousClock.now - ready.at).components.attoseconds) / 1e18)
        var range: Substring?
        #expect(await eventually(timeout: .seconds(6)) {
            let text = (try? await Self.fetch(base + "index.m3u8?" + token))?.text ?? ""
            range = text.split(separator: "\n").first { $0.hasPrefix("#EXT-X-DATERANGE") && $0.contains("tone-880") }
            return range != nil
        })
        let start = try #require(range.flatMap { $0.firstRange(of: #/START-DATE="([^"]+)"/#).map { $0 } })
        let startDate = try #require(Self.date(range![start].dropFirst(12).dropLast()))
        #expect(abs(startDate.timeIntervalSince(readyAt)) <= 2.5, "the range starts \(startDate.timeIntervalSince(readyAt)) s from the track")

        // Stopped and silent past 10 s, the playlist says it has ended.
        #expect(try await cluster.stopSession(session).status == 200)
        try await Task.sleep(for: .seconds(11))
        #expect(try await Self.fetch(base + "index.m3u8?" + token).text.hasSuffix("#EXT-X-ENDLIST\n"))
        bot.close()
    }
}
