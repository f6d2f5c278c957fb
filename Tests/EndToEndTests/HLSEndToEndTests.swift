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
        // A new segmenter answers once it holds three segments (Chromium's own HLS refuses fewer),
        // naming the track that was playing when it started.
        #expect(first.text.components(separatedBy: ".m4s?").count - 1 >= 3, "\(first.text)")
        #expect(first.text.contains(#"X-TITLE="tone-440.mp3""#), "\(first.text)")
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

        // A gapless join (the queue moving on, crossfade 0) is no discontinuity: every
        // discontinuity ever marked is either still a tag in the playlist or counted by
        // EXT-X-DISCONTINUITY-SEQUENCE once it left (RFC 8216 §6.2.2), so their sum stays.
        func discontinuities() async throws -> Int {
            let lines = try await Self.fetch(base + "index.m3u8?" + token).text.split(separator: "\n")
            let left = lines.first { $0.hasPrefix("#EXT-X-DISCONTINUITY-SEQUENCE:") }.flatMap { Int($0.dropFirst(30)) } ?? -1
            return left + lines.filter { $0 == "#EXT-X-DISCONTINUITY" }.count
        }
        // Replacing the track was a gap (the old play's `finished` before the new one's `ready`):
        // the segment after it carries that discontinuity, and is waited for before counting.
        #expect(await eventually(timeout: .seconds(6)) {
            let text = (try? await Self.fetch(base + "index.m3u8?" + token))?.text ?? ""
            let last = text.split(separator: "\n").last { $0.hasPrefix("#EXT-X-PROGRAM-DATE-TIME:") }
            return last.flatMap { Self.date($0.dropFirst(25)) }.map { $0 >= startDate } ?? false
        })
        let before = try await discontinuities()
        let playlistBefore = try await Self.fetch(base + "index.m3u8?" + token).text
        let joinFrom = ContinuousClock.now
        #expect(try await cluster.post(cluster.routerURL + "/api/sessions/\(session)/queue", #"{"url":"tone-440.mp3"}"#).status < 300)
        #expect(try await cluster.post(cluster.routerURL + "/api/sessions/\(session)/seek", #"{"position_ms":27000}"#).status < 300)
        #expect(await bot.hears(440))
        // An observation window: two segments cut after the join.
        try await Task.sleep(for: .seconds(4))
        let after = try await discontinuities()
        #expect(after == before, "the gapless join was marked as a discontinuity")
        if after != before {
            let events = bot.all.filter { $0.at >= joinFrom }.compactMap { entry -> String? in
                if case .text(let text) = entry.message { return "\(entry.at - joinFrom): \(text)" }
                return nil
            }
            print("before the join:\n\(playlistBefore)\nafter:\n\(try await Self.fetch(base + "index.m3u8?" + token).text)\nevents:\n\(events.joined(separator: "\n"))")
        }

        // Stopped and silent past 10 s, the playlist says it has ended.
        #expect(try await cluster.stopSession(session).status == 200)
        #expect(
            await eventually(timeout: .seconds(15)) {
                (try? await Self.fetch(base + "index.m3u8?" + token).text.hasSuffix("#EXT-X-ENDLIST\n")) == true
            }, "the playlist never said it had ended")
        bot.close()
    }

    struct ListenToken: Decodable {
        var session_id: String
        var token: String
        var listen: String
        var hls: String
        var page: String
    }

    /// A listen token hears its session over HLS and Ogg, and nothing else: no control, no other
    /// session, no search, no WebSocket.
    @Test func aListenTokenHearsItsSessionAndControlsNothing() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 20)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let identity = try await cluster.post(cluster.routerURL + "/api/identity")
        let me = try JSONSerialization.jsonObject(with: Data(identity.body.utf8)) as? [String: Any]
        let session = try #require(me?["session_id"] as? String), owner = try #require(me?["token"] as? String)
        #expect(try await cluster.play(session, "tone-440.mp3", token: owner).status == 202)

        #expect(try await cluster.post(cluster.routerURL + "/api/sessions/\(session)/listen-token", token: nil).status == 401)
        let made = try await cluster.post(cluster.routerURL + "/api/sessions/\(session)/listen-token", token: owner)
        #expect(made.status == 200, "\(made.body)")
        let listen = try JSONDecoder().decode(ListenToken.self, from: Data(made.body.utf8))
        #expect(listen.token.hasPrefix("l1.\(session).") && listen.session_id == session)
        #expect(listen.page == "/radio/?session=\(session)&token=\(listen.token)")

        // It hears: the playlist, a segment, and the Ogg stream (the tone, decoded by ffmpeg).
        let playlist = try await Self.fetch(cluster.routerURL + listen.hls)
        #expect(playlist.status == 200 && playlist.text.contains("token=\(listen.token)"), "\(playlist.text)")
        let raw = cluster.directory.file("listen.f32")
        _ = try runTool("ffmpeg", [
            "-nostdin", "-loglevel", "error", "-y", "-i", cluster.routerURL + listen.listen, "-t", "2", "-f", "f32le", "-ac", "2",
            "-ar", "48000", raw,
        ])
        let samples = try Data(contentsOf: URL(fileURLWithPath: raw)).withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
        #expect(samples.count >= 2 * 48_000, "ffmpeg decoded \(samples.count / 96_000) s")
        #expect(abs(Spectrum.dominantFrequency(Spectrum.left(Array(samples.suffix(48_000)))) - 440) < 10)

        // It controls nothing, and hears nothing else.
        for command in ["pause", "stop", "listen-token"] {
            let refused = try await cluster.post(cluster.routerURL + "/api/sessions/\(session)/\(command)", "{}", token: listen.token)
            #expect(refused.status == 403 && refused.body.contains("only hear"), "\(command): \(refused.status) \(refused.body)")
        }
        #expect(try await Self.fetch(cluster.routerURL + "/api/sessions/\(session)?token=\(listen.token)").status == 403)
        #expect(try await Self.fetch(cluster.routerURL + "/api/search?q=tone&token=\(listen.token)").status == 403)
        #expect(try await Self.fetch(cluster.routerURL + "/hls/someone-else/index.m3u8?token=\(listen.token)").status == 403)
        #expect(try await Self.fetch(cluster.routerURL + "/listen/someone-else.ogg?token=\(listen.token)").status == 403)
        #expect(try await Self.fetch(cluster.routerURL + "/ws?token=\(listen.token)").status == 403)
        let forged = "l1.\(session).AAAA"
        #expect(try await Self.fetch(cluster.routerURL + "/hls/\(session)/index.m3u8?token=\(forged)").status == 401)
        // The session still plays.
        #expect(try await cluster.getJSON(cluster.routerURL + "/api/sessions/\(session)", token: owner)?["status"] as? String == "playing")
    }
}
