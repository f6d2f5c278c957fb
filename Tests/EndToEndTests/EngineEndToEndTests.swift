// The complete engine through its real binary: controls heard in the audio, control latency,
// Opus passthrough, network sources that stall and drop, yt-dlp, limits and idle cleanup.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing
import WireProtocol

@testable import AudioEngine

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1_000 + Double(duration.components.attoseconds) / 1e15
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct EngineEndToEndTests {
    @Test func pauseResumeSeekAndVolumeAreHeardWithinSixtyMilliseconds() async throws {
        let harness = try EngineHarness(environment: ProcessInfo.processInfo.environment["LEAD"].map { ["TONEARM_ENCODE_LEAD_FRAMES": $0] } ?? [:])
        try Signal.steps(seconds: 40, into: harness.media, name: "steps.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "controls"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"steps.mp3"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets(s).count >= 100 })
        #expect(try Signal.secondsHeard(socket.packets(s).map(\.data)).prefix(2).map { $0.rounded() } == [400, 440])

        // Pause: nothing after the request (but what was already on its way), `paused` event.
        var latencies: [String: [Double]] = [:]
        for _ in 0..<3 {
            let mark = socket.count
            let requested = ContinuousClock.now
            #expect(try await harness.post("/session/\(s)/pause").status == 200)
            try await observe(for: .milliseconds(600))
            let after = socket.packets(s, from: mark)
            let last = after.last.map { milliseconds($0.at - requested) } ?? 0
            latencies["pause", default: []].append(max(last, 0))
            #expect(after.filter { $0.at - requested > .milliseconds(80) }.isEmpty, "packets kept coming while paused")
            #expect(socket.firstEvent(s, .paused, from: mark) != nil)
            // Resume: the first packet follows within one tick or two.
            let resumeMark = socket.count
            let resumed = ContinuousClock.now
            #expect(try await harness.post("/session/\(s)/resume").status == 200)
            #expect(await eventually { !socket.packets(s, from: resumeMark).isEmpty })
            latencies["resume", default: []].append(milliseconds(socket.packets(s, from: resumeMark)[0].at - resumed))
            try await observe(for: .milliseconds(300))
        }
        // Resume while streaming is refused.
        let refused = try await harness.post("/session/\(s)/resume")
        #expect(refused.status == 409)
        #expect((refused.json["error"] as? [String: Any])?["code"] as? String == "invalid_state")

        // Seek: the tone of the new position is heard, from the first packet after `seeked`.
        for target in [20, 7, 25] {
            let mark = socket.count
            let requested = ContinuousClock.now
            #expect(try await harness.post("/session/\(s)/seek", #"{"position_ms":\#(target * 1000)}"#).status == 200)
            #expect(await eventually { socket.packets(s, from: mark).count >= 60 })
            let seeked = try #require(socket.firstEvent(s, .seeked, from: mark))
            let after = socket.packets(s, from: mark).filter { $0.at >= seeked.at }
            latencies["seek", default: []].append(milliseconds(after[0].at - requested))
            let heard = try Signal.secondsHeard(Array(after.prefix(50)).map(\.data))
            #expect(abs(heard[0] - Signal.stepFrequency(second: target)) < 5, "after seeking to \(target) s heard \(heard)")
        }

        // Volume: the level drops by 6 dB at 50 %, from the first affected packet on.
        var level = 0.0
        // Eight changes, each heard from the next frame sent (the frames encoded ahead are
        // rendered again): up to one tick of waiting, 5–20 ms at the socket.
        for (volume, change) in Array(repeating: [(50, -6.02), (100, 6.02)], count: 4).joined() {
            try await observe(for: .milliseconds(400))
            let before = try Signal.levels(socket.packets(s).suffix(40).map(\.data)).suffix(10)
            level = before.reduce(0, +) / Double(before.count)
            let mark = socket.count
            let requested = ContinuousClock.now
            #expect(try await harness.post("/session/\(s)/volume", #"{"volume":\#(volume)}"#).status == 200)
            try await observe(for: .milliseconds(500))
            let window = socket.packets(s, from: mark)
            let levels = try Signal.levels(socket.packets(s).suffix(window.count + 30).map(\.data)).suffix(window.count)
            // The first affected packet is the one whose gain ramp starts. Opus delays decoded
            // audio by 6.5 ms, so that packet carries only the ramp's first 13.5 ms: look for 0.4 dB.
            let firstAffected = try #require(levels.firstIndex { abs($0 - level) > 0.4 }, "the level never changed")
            latencies["volume", default: []].append(milliseconds(window[firstAffected - levels.startIndex].at - requested))
            let settled = levels.suffix(10).reduce(0, +) / 10
            #expect(abs((settled - level) - change) < 1, "volume \(volume): level went from \(level) to \(settled) dB")
        }
        for (control, values) in latencies.sorted(by: { $0.key < $1.key }) {
            let sorted = values.sorted()
            print("control latency \(control): \(sorted.map { String(format: "%.1f", $0) }.joined(separator: ", ")) ms")
            #expect(sorted.last! <= 70, "\(control) took \(sorted.last!) ms")
            #expect(sorted[sorted.count / 2] <= 60, "\(control) median \(sorted[sorted.count / 2]) ms")
        }
        let info = try await harness.get("/session/\(s)")
        #expect(info.json["state"] as? String == "streaming")
        #expect(((info.json["frames"] as? [String: Any])?["sent"] as? Int ?? 0) > 200)
        socket.close()
    }

    /// Half a second encoded ahead (25 frames), and a change of volume or filters is still heard
    /// in the next frame or two sent: the frames waiting are rendered again with it, or, from an
    /// Opus source passed through untouched, taken back and rendered. (Left to go out first, the
    /// change would come 25 frames late.)
    @Test(arguments: ["steps.mp3", "steps.webm"])
    func volumeAndFiltersAreHeardInTheNextFramesHoweverLongTheLead(file: String) async throws {
        let harness = try EngineHarness(environment: ["TONEARM_ENCODE_LEAD_FRAMES": "25"])
        let opus = ["-c:a", "libopus", "-b:a", "128k", "-frame_duration", "20"]
        try Signal.steps(seconds: 40, into: harness.media, name: file, extra: file.hasSuffix(".webm") ? opus : [])
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "lead"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"\#(file)","normalize":false}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets(s).count >= 100 })
        #expect(socket.firstEvent(s, .ready)?.event.passthrough == file.hasSuffix(".webm"))
        // The tone is the same in both channels: karaoke takes it out.
        let changes = [
            ("volume", #"{"volume":30}"#), ("volume", #"{"volume":100}"#), ("filters", #"{"karaoke":{}}"#), ("filters", "{}"),
        ]
        for (command, body) in Array(repeating: changes, count: 2).joined() {
            try await observe(for: .milliseconds(400))
            let before = try Signal.levels(socket.packets(s).suffix(40).map(\.data)).suffix(10)
            let level = before.reduce(0, +) / Double(before.count)
            let mark = socket.count
            #expect(try await harness.post("/session/\(s)/\(command)", body).status == 200)
            try await observe(for: .milliseconds(300))
            let window = socket.packets(s, from: mark)
            let levels = try Signal.levels(socket.packets(s).suffix(window.count + 30).map(\.data)).suffix(window.count)
            let firstAffected = try #require(levels.firstIndex { abs($0 - level) > 0.4 }, "\(command) \(body) was never heard")
            #expect(firstAffected - levels.startIndex <= 3, "\(command) \(body) heard \(firstAffected - levels.startIndex) frames after the request")
        }
        let frames = try await harness.get("/session/\(s)").json["frames"] as? [String: Any]
        #expect(frames?["nulled"] as? Int == 0)
        socket.close()
    }

    @Test func opusPassthroughIsByteIdenticalAndVolumeSwitchesItOffAndOn() async throws {
        let harness = try EngineHarness()
        let file = harness.media + "/chord.webm"
        let wave = "0.3*sin(2*PI*523.25*t)+0.2*sin(2*PI*659.25*t)"
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=12", "-c:a", "libopus", "-b:a", "128k",
            "-frame_duration", "20", file,
        ])
        let source = try MediaDecoder(path: file)
        var sourcePackets: [[UInt8]] = []
        while case .value(let packet) = try source.readPacket() { sourcePackets.append(packet.data) }
        #expect(sourcePackets.count >= 595)

        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "pass"
        // Loudness normalisation (on for a new session) would decode it: off here, then on below.
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"chord.webm","normalize":false}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets(s).count >= 100 })
        let ready = try #require(socket.firstEvent(s, .ready))
        #expect(ready.event.passthrough == true)
        let first = socket.packets(s).map(\.data)
        #expect(Array(first.prefix(100)) == Array(sourcePackets.prefix(100)), "passthrough packets differ from the source")
        #expect(try await harness.get("/session/\(s)").json["passthrough"] as? Bool == true)

        let baseline = try Signal.levels(first).suffix(20).reduce(0, +) / 20
        #expect(try await harness.post("/session/\(s)/volume", #"{"volume":50}"#).status == 200)
        try await observe(for: .milliseconds(600))
        #expect(try await harness.get("/session/\(s)").json["passthrough"] as? Bool == false)
        let quiet = try Signal.levels(socket.packets(s).map(\.data)).suffix(15).reduce(0, +) / 15
        #expect(abs((quiet - baseline) + 6.02) < 1, "50 %: \(baseline) → \(quiet) dB")

        let back = socket.count
        #expect(try await harness.post("/session/\(s)/volume", #"{"volume":100}"#).status == 200)
        try await observe(for: .milliseconds(600))
        #expect(try await harness.get("/session/\(s)").json["passthrough"] as? Bool == true)
        // The latest packets are the source's own again, in order.
        let recent = socket.packets(s, from: back).map(\.data).suffix(10)
        let start = try #require(sourcePackets.firstIndex(of: recent.first!), "packets after 100 % are not the source's")
        #expect(Array(sourcePackets[start..<(start + recent.count)]) == Array(recent))
        // Normalisation on: the chord (about −9.5 LUFS) is decoded and brought down towards −14;
        // off again: the gain glides back and the source's own packets go out once more.
        #expect(try await harness.post("/session/\(s)/normalize", #"{"enabled":true}"#).status == 200)
        try await observe(for: .milliseconds(1_000))
        #expect(try await harness.get("/session/\(s)").json["passthrough"] as? Bool == false)
        let normalised = try Signal.levels(socket.packets(s).map(\.data)).suffix(15).reduce(0, +) / 15
        #expect(normalised < baseline - 3, "normalised: \(baseline) → \(normalised) dB")
        #expect(try await harness.post("/session/\(s)/normalize", #"{"enabled":false}"#).status == 200)
        try await observe(for: .milliseconds(1_000))
        #expect(try await harness.get("/session/\(s)").json["passthrough"] as? Bool == true)
        // No gap through every switch: every 20 ms a packet, nothing missing.
        let all = socket.packets(s)
        let gaps = zip(all.dropFirst(), all).map { milliseconds($0.at - $1.at) }
        #expect(gaps.max() ?? 0 < 100, "a gap of \(gaps.max() ?? 0) ms")
        let frames = try await harness.get("/session/\(s)").json["frames"] as? [String: Any]
        #expect(frames?["nulled"] as? Int == 0)
        socket.close()
    }

    /// Lavalink's timescale through the real engine: `progress` positions move in the track's
    /// time (2 s a second at speed 2), and a seek under a pitch lands where it was asked and is
    /// heard there, at the raised pitch.
    @Test func aTimescaleKeepsPositionsAndSeeksInTheTracksTime() async throws {
        let harness = try EngineHarness()
        try Signal.steps(seconds: 40, into: harness.media, name: "steps.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "timescale"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"steps.mp3"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets(s).count >= 50 })
        let mark = socket.count
        #expect(try await harness.post("/session/\(s)/filters", #"{"timescale":{"speed":2}}"#).status == 200)
        func progress() -> [Int64] {
            socket.events(s, from: mark).filter { $0.event.type == .progress }.compactMap(\.event.positionMS)
        }
        #expect(await eventually(timeout: .seconds(10)) { progress().count >= 4 })
        let positions = progress()
        // The first second after the change straddles it; every later one covers 2 s of the track.
        for (earlier, later) in zip(positions.dropFirst(), positions.dropFirst(2)) {
            #expect(abs(later - earlier - 2_000) <= 40, "progress positions \(positions)")
        }

        #expect(try await harness.post("/session/\(s)/filters", #"{"timescale":{"pitch":1.5}}"#).status == 200)
        let seekMark = socket.count
        #expect(try await harness.post("/session/\(s)/seek", #"{"position_ms":10000}"#).status == 200)
        #expect(await eventually { socket.packets(s, from: seekMark).count >= 60 })
        let seeked = try #require(socket.firstEvent(s, .seeked, from: seekMark))
        let after = socket.packets(s, from: seekMark).filter { $0.at >= seeked.at }
        let heard = try Signal.secondsHeard(Array(after.prefix(50)).map(\.data))
        #expect(abs(heard[0] - 1.5 * Signal.stepFrequency(second: 10)) < 8, "after the seek heard \(heard) Hz")
        let position = try await harness.get("/session/\(s)").json["position_ms"] as? Int ?? 0
        #expect((10_000...13_000).contains(position), "position \(position) ms after seeking to 10 s")
        socket.close()
    }

    @Test func anHttpSourceThatStallsAndDropsPlaysWithoutAGapOrARepeat() async throws {
        let harness = try EngineHarness()
        let served = try TemporaryDirectory(prefix: "tonearm-www")
        try Signal.steps(seconds: 12, into: served.path, name: "steps.mp3", extra: ["-b:a", "128k"])
        let server = try MediaServer(
            root: served.path, arguments: ["--rate", "48000", "--stall-at", "64000", "--stall-seconds", "2", "--drop-at", "128000"])
        defer { server.stop() }
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "net"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"\#(server.url("steps.mp3"))"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(25)) { socket.firstEvent(s, .finished) != nil })
        let finished = try #require(socket.firstEvent(s, .finished))
        #expect(finished.event.reason == .finished)
        let packets = socket.packets(s)
        #expect(abs(packets.count - 600) <= 3, "\(packets.count) frames for 12 s")
        let heard = try Signal.secondsHeard(packets.map(\.data))
        for (second, frequency) in heard.enumerated() {
            #expect(abs(frequency - Signal.stepFrequency(second: second)) < 5, "second \(second) sounded \(frequency) Hz: \(heard)")
        }
        let gaps = zip(packets.dropFirst(), packets).map { milliseconds($0.at - $1.at) }
        #expect(gaps.max() ?? 0 < 100, "a gap of \(gaps.max() ?? 0) ms")
        let info = try await harness.get("/session/\(s)")
        #expect((info.json["frames"] as? [String: Any])?["nulled"] as? Int == 0)
        // The drop made the engine reopen with a range request from where it stopped.
        let log = try await HTTPClientText.get(server.url("requests"))
        let ranges = log.split(separator: "\n").filter { $0.contains("bytes=") && !$0.contains("bytes=0-") }
        #expect(!ranges.isEmpty, "no resuming range request: \(log)")
        socket.close()
    }

    @Test func aSourceThatNeverComesBackEndsWithAnError() async throws {
        let harness = try EngineHarness()
        let served = try TemporaryDirectory(prefix: "tonearm-www")
        try Signal.steps(seconds: 20, into: served.path, name: "steps.mp3", extra: ["-b:a", "128k"])
        let server = try MediaServer(root: served.path, arguments: ["--rate", "24000"])
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "gone"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"\#(server.url("steps.mp3"))"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets(s).count >= 50 })
        server.stop()
        #expect(await eventually(timeout: .seconds(20)) { socket.firstEvent(s, .finished) != nil })
        let error = try #require(socket.firstEvent(s, .error))
        #expect(error.event.code == "source_read_failed", "\(error.event)")
        #expect(socket.firstEvent(s, .finished)?.event.reason == .error)
        #expect(try await harness.get("/session/\(s)").json["state"] as? String == "error")
        socket.close()
    }

    @Test func ytDlpResolvesALocalPageToItsAudio() async throws {
        let harness = try EngineHarness()
        let served = try TemporaryDirectory(prefix: "tonearm-www")
        try MediaFixture.tone(660, seconds: 6, into: served.path, name: "song.mp3")
        try """
        <!doctype html><html><head><title>A Local Song</title>
        <meta property="og:title" content="A Local Song"></head>
        <body><audio controls src="song.mp3"></audio></body></html>
        """.write(toFile: served.path + "/page.html", atomically: true, encoding: .utf8)
        let server = try MediaServer(root: served.path)
        defer { server.stop() }
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let resolved = try await harness.get("/resolve?url=\(server.url("page.html"))")
        #expect(resolved.status == 200, "\(resolved.json)")
        // yt-dlp's generic extractor finds the page's one <audio>: a single track (it numbers the
        // title: "A Local Song (1)"), not a playlist.
        #expect((resolved.json["title"] as? String)?.hasPrefix("A Local Song") == true, "\(resolved.json)")
        #expect(resolved.json["is_playlist"] as? Bool == false)
        #expect((resolved.json["entries"] as? [Any])?.isEmpty == true)
        let s = "page"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"\#(server.url("page.html"))"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(30)) { socket.packets(s).count >= 60 })
        let ready = try #require(socket.firstEvent(s, .ready))
        #expect(ready.event.title?.contains("A Local Song") == true, "title \(ready.event.title ?? "nil")")
        #expect(abs(try tone(of: socket.packets(s).map(\.data)) - 660) < 5)
        let bad = try await harness.post("/session/bad/play", #"{"url":"\#(server.url("nothing.html"))"}"#)
        #expect(bad.status == 202)
        #expect(await eventually(timeout: .seconds(30)) { socket.firstEvent("bad", .error) != nil })
        socket.close()
    }

    @Test func aResumeAfterTheStreamURLExpiredResolvesThePageAgain() async throws {
        let harness = try EngineHarness()
        let served = try TemporaryDirectory(prefix: "tonearm-www")
        try Signal.steps(seconds: 20, into: served.path, name: "steps.mp3")
        // A signed stream URL that expires in 30 s: within the engine's one-minute safety margin,
        // so it counts as expired when the play resumes.
        let expire = Int(Date().timeIntervalSince1970) + 30
        try """
        <!doctype html><html><head><title>Expiring</title></head>
        <body><audio src="steps.mp3?expire=\(expire)"></audio></body></html>
        """.write(toFile: served.path + "/page.html", atomically: true, encoding: .utf8)
        let server = try MediaServer(root: served.path)
        defer { server.stop() }
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let s = "expiring"
        #expect(try await harness.post("/session/\(s)/play", #"{"url":"\#(server.url("page.html"))"}"#).status == 202)
        #expect(await eventually(timeout: .seconds(30)) { socket.packets(s).count >= 150 })
        let paused = try await harness.post("/session/\(s)/pause")
        let position = try #require(paused.json["position_ms"] as? Int)
        try await observe(for: .milliseconds(300))
        let mark = socket.count
        #expect(try await harness.post("/session/\(s)/resume").status == 200)
        #expect(await eventually(timeout: .seconds(30)) { socket.packets(s, from: mark).count >= 60 })
        let log = try await HTTPClientText.get(server.url("requests"))
        #expect(log.components(separatedBy: "/page.html").count - 1 == 2, "the page was not resolved again: \(log)")
        // The play continues where it paused: the tone of that second (or the next).
        let heard = try tone(of: Array(socket.packets(s, from: mark).prefix(50)).map(\.data), lastFrames: 20)
        let second = position / 1000
        let candidates = [second, second + 1].map { Signal.stepFrequency(second: $0) }
        #expect(candidates.contains { abs($0 - heard) < 5 }, "paused at \(position) ms, heard \(heard) Hz after resume")
        #expect(socket.firstEvent(s, .error) == nil)
        socket.close()
    }

    @Test func sessionLimitIdleCleanupAndRefusals() async throws {
        let harness = try EngineHarness(environment: ["TONEARM_MAX_SESSIONS": "3", "TONEARM_IDLE_TIMEOUT": "1", "TONEARM_ALLOW_PRIVATE_SOURCES": "0"])
        try MediaFixture.tone(440, seconds: 20, into: harness.media)
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        for id in ["a", "b", "c"] {
            #expect(try await harness.post("/session/\(id)/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        }
        let full = try await harness.post("/session/d/play", #"{"url":"tone-440.mp3"}"#)
        #expect(full.status == 503)
        #expect((full.json["error"] as? [String: Any])?["code"] as? String == "pool_exhausted")
        #expect(await eventually { socket.packets("b").count >= 20 })
        #expect(try await harness.post("/session/a/stop").status == 200)
        #expect(try await harness.post("/session/b/pause").status == 200)
        // Both are idle now; after the 1 s timeout they are gone, the paused one with finished/cleanup.
        #expect(await eventually(timeout: .seconds(5)) { (try? await harness.get("/session/b").status) == 404 })
        #expect((try await harness.get("/session/a")).status == 404)
        #expect(socket.firstEvent("b", .finished)?.event.reason == .cleanup)
        #expect((try await harness.get("/session/c")).json["state"] as? String == "streaming")
        for url in ["file:///etc/passwd", "http://127.0.0.1:1/a.mp3", "../../etc/passwd"] {
            let refused = try await harness.post("/session/r/play", #"{"url":"\#(url)"}"#)
            #expect(refused.status == 422, "\(url): \(refused)")
        }
        // Prometheus text with the counters operators alert on.
        let metrics = try await HTTPClientText.get(harness.url + "/metrics")
        for name in [
            "tonearm_engine_frames_sent_total", "tonearm_engine_frames_nulled_total", "tonearm_engine_encode_seconds_bucket",
            #"tonearm_engine_sessions{state="streaming"} 1"#, "tonearm_engine_router_connections 1",
            "tonearm_engine_encode_lead_frames ",
        ] {
            #expect(metrics.contains(name), "metrics lack \(name)")
        }
        let lint = try Promtool.check(metrics)
        #expect(lint.ok, "promtool: \(lint.report)")
        // Graceful shutdown: the playing session ends with finished/stopped, the socket file goes.
        let mark = socket.count
        #expect(await harness.engine?.terminate() == true)
        #expect(harness.engine?.exitCode == 0)
        #expect(socket.firstEvent("c", .finished, from: mark)?.event.reason == .stopped)
        #expect(!FileManager.default.fileExists(atPath: harness.socketPath))
        socket.close()
    }

    @Test func aRouterConnectionThatStopsReadingLosesOnlyItsOwnFrames() async throws {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 20, into: harness.media)
        let healthy = try await harness.start()
        defer { Task { await harness.stop() } }
        let stuck = try await SocketRecorder.connect(harness.socketPath, reading: false)
        for i in 0..<30 {
            #expect(try await harness.post("/session/s\(i)/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        }
        #expect(await eventually { healthy.packets("s0").count >= 10 })
        let mark = healthy.count
        let before = try await harness.get("/health")
        let nulledBefore = (before.json["frames"] as? [String: Any])?["nulled"] as? Int ?? 0
        let started = ContinuousClock.now
        try await observe(for: .seconds(5))
        let elapsed = ContinuousClock.now - started
        let packets = healthy.packets("s29", from: mark)
        let expected = Int(milliseconds(elapsed) / 20)
        #expect(abs(packets.count - expected) <= 3, "healthy connection got \(packets.count) of \(expected) frames")
        let gaps = zip(packets.dropFirst(), packets).map { milliseconds($0.at - $1.at) }
        #expect(gaps.max() ?? 0 < 100, "healthy connection saw a gap of \(gaps.max() ?? 0) ms")
        let health = try await harness.get("/health")
        let dropped = (health.json["dropped_frames"] as? Int ?? 0) - (before.json["dropped_frames"] as? Int ?? 0)
        print("stuck Router connection: \(dropped) frames dropped for it in the window")
        #expect(dropped > 0, "the stuck connection had no frames dropped in the window")
        // No deadline missed while the stuck connection was dropping frames. (Thirty plays
        // starting at once on a busy host may miss one before: that is the CPU, not this.)
        let nulled = ((health.json["frames"] as? [String: Any])?["nulled"] as? Int).map { $0 - nulledBefore }
        #expect(nulled == 0, "\(nulled.map(String.init) ?? "no count") deadlines missed in the window, \(nulledBefore) before it")
        #expect(stuck.count == 0)
        stuck.close()
        healthy.close()
    }

    @Test func searchGoesThroughYtDlp() async throws {
        // YouTube is out of reach here: a stand-in yt-dlp answers the search as the real one does.
        let fake = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/fake-yt-dlp").path
        let harness = try EngineHarness(environment: ["TONEARM_YTDLP": fake])
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let found = try await harness.get("/search?q=lofi%20beats&limit=2")
        #expect(found.status == 200)
        let results = try #require(found.json["results"] as? [[String: Any]])
        #expect(results.count == 2)
        #expect(results.first?["title"] as? String == "lofi beats 1")
        #expect(results.first?["duration_ms"] as? Int == 61_000)
        #expect(try await harness.get("/search?q=x&limit=0").status == 400)
        #expect(try await harness.get("/search").status == 400)
        socket.close()
    }

    @Test func sixtySessionsAtOnceWithoutCrossTalkOrLateFrames() async throws {
        let harness = try EngineHarness(environment: ProcessInfo.processInfo.environment["LEAD"].map { ["TONEARM_ENCODE_LEAD_FRAMES": $0] } ?? [:])
        let frequencies = (0..<60).map { 300 + 25 * $0 }
        for frequency in frequencies { try MediaFixture.tone(frequency, seconds: 20, into: harness.media) }
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        for (i, frequency) in frequencies.enumerated() {
            #expect(try await harness.post("/session/s\(i)/play", #"{"url":"tone-\#(frequency).mp3"}"#).status == 202)
        }
        #expect(await eventually(timeout: .seconds(20)) { (0..<60).allSatisfy { socket.packets("s\($0)").count >= 150 } })
        // Starting 60 plays within a second can leave some frames short while 60 sources open on
        // two cores (seen once in five runs: 1 nulled of 11,309; on a host half as fast, hundreds);
        // what is held to zero here is the steady state that follows, from the first second with
        // no late frame on (waited for up to 10 s). Benchmarks measure start-up bursts (issue 7).
        func nulled() async throws -> Int? {
            (try await harness.get("/health").json["frames"] as? [String: Any])?["nulled"] as? Int
        }
        var settled = try await nulled()
        for _ in 0..<10 {
            try await observe(for: .seconds(1))
            let now = try await nulled()
            if now == settled { break }  // (the pacer's own deficit is compared the same way below)
            settled = now
        }
        // The steady state is judged in windows of 3 s, up to three: one with no late frame and
        // no missed tick passes. A window can lose frames to the host alone (CI at eafe19f: 19
        // of 9,000 in one window on a VM whose hypervisor takes 10–120 ms of CPU a second, while
        // 60 s of the same 60 sessions here had none); an engine that makes frames late as it
        // runs does so in every window.
        var windows: [(nulled: Int, deficit: Int)] = []
        var started: [String: Any]?
        var health = try await harness.get("/health")
        for _ in 0..<3 {
            started = health.json["frames"] as? [String: Any]
            try await observe(for: .seconds(3))
            health = try await harness.get("/health")
            let frames = health.json["frames"] as? [String: Any]
            func grew(_ key: String) -> Int { (frames?[key] as? Int ?? -1) - (started?[key] as? Int ?? 0) }
            windows.append((grew("nulled"), grew("deficit")))
            if windows.last.map({ $0.nulled == 0 && $0.deficit == 0 }) == true { break }
        }
        #expect(health.json["playing"] as? Int == 60)
        for (i, frequency) in frequencies.enumerated() {
            let heard = try tone(of: socket.packets("s\(i)").map(\.data), lastFrames: 100)
            #expect(abs(heard - Double(frequency)) < 5, "session s\(i) heard \(heard) Hz, expected \(frequency)")
        }
        let frames = health.json["frames"] as? [String: Any]
        print("60 sessions: \(frames ?? [:]), windows of 3 s (nulled, deficit): \(windows)")
        #expect(windows.last?.nulled == 0, "frames went late in every window of the steady state: \(windows)")
        #expect(windows.last?.deficit == 0, "the pacer missed a tick in every window of the steady state: \(windows)")
        socket.close()
    }
}

/// A plain GET returning text.
enum HTTPClientText {
    static func get(_ url: String) async throws -> String {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        return String(buffer: try await response.body.collect(upTo: 1 << 20))
    }

    static func post(_ url: String) async throws -> String {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        return String(buffer: try await response.body.collect(upTo: 1 << 20))
    }
}
