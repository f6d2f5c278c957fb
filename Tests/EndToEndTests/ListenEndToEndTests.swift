// Ogg listening through the real binaries: a token from /api/identity, the live session as Ogg
// Opus, decoded by the ffmpeg command line; 401 without a token, 403 with another session's.
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(2))) struct ListenEndToEndTests {
    struct IdentityReply: Decodable {
        var token: String
        var session_id: String
    }

    func identity(_ cluster: TonearmCluster) async throws -> IdentityReply {
        let reply = try await cluster.post(cluster.routerURL + "/api/identity")
        #expect(reply.status == 200)
        return try JSONDecoder().decode(IdentityReply.self, from: Data(reply.body.utf8))
    }

    func status(_ url: String) async throws -> Int {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(5))
        return Int(response.status.code)
    }

    @Test func aBrowserTokenControlsAndHearsOnlyItsOwnSession() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 10)
        try cluster.startEngine()
        try cluster.startRouter()
        defer { Task { [cluster] in await cluster.stop() } }
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() })
        let me = try await identity(cluster)
        let other = try await identity(cluster)
        let unauthorized = try await cluster.play(me.session_id, "tone-440.mp3", token: nil)
        #expect(unauthorized.status == 401)
        #expect(unauthorized.body.contains(#""code":"unauthorized""#))
        #expect(try await cluster.play(me.session_id, "tone-440.mp3", token: "v1.\(me.session_id).forged").status == 401)
        let forbidden = try await cluster.play(me.session_id, "tone-440.mp3", token: other.token)
        #expect(forbidden.status == 403)
        #expect(forbidden.body.contains(#""code":"forbidden""#))
        // The user's own token: the WebSocket needs no session id, the token names it.
        let mine = SessionListener(session: me.session_id, routerPort: cluster.routerPort, token: me.token)
        // The other user's socket, open on their own session (their token names it).
        let spy = SessionListener(session: me.session_id, routerPort: cluster.routerPort, token: other.token)
        #expect(await eventually { mine.isConnected && spy.isConnected })
        #expect(await eventually { spy.states().contains { $0["session_id"] as? String == other.session_id } })
        #expect(try await cluster.play(me.session_id, "tone-440.mp3", token: me.token).status == 202)
        #expect(await eventually(timeout: .seconds(5)) { mine.audio().count >= 50 })
        // The other user's open socket hears nothing of it, nor any event of it.
        #expect(spy.isConnected)
        #expect(spy.audio().isEmpty)
        #expect(!spy.texts().contains { $0["session_id"] as? String == me.session_id })
        // A socket with a bad token is refused: it ends without ever connecting.
        let refused = SessionListener(session: me.session_id, routerPort: cluster.routerPort, token: "garbage")
        #expect(await eventually { refused.hasEnded })
        #expect(refused.all.isEmpty)
        mine.close()
        spy.close()
    }

    @Test func aListenerJoiningMidStreamGetsPlayableOggOpus() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 20)
        try cluster.startEngine()
        try cluster.startRouter()
        defer { Task { [cluster] in await cluster.stop() } }
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() })
        let me = try await identity(cluster)
        let someoneElse = try await identity(cluster)
        #expect(me.session_id.count == 19 && me.session_id != someoneElse.session_id)
        #expect(try await cluster.play(me.session_id, "tone-440.mp3").status == 202)
        #expect(await eventually { (try? await cluster.getJSON(cluster.routerURL + "/api/sessions/\(me.session_id)", token: TonearmCluster.botToken))?["status"] as? String == "playing" })

        let listen = cluster.routerURL + "/listen/\(me.session_id).ogg"
        #expect(try await status(listen) == 401)
        #expect(try await status(listen + "?token=garbage") == 401)
        #expect(try await status(listen + "?token=\(someoneElse.token)") == 403)

        // Join mid-stream and keep 3 s of what arrives.
        let response = try await HTTPClient.shared.execute(
            HTTPClientRequest(url: listen + "?token=\(me.token)"), timeout: .seconds(30))
        #expect(response.status == .ok)
        #expect(response.headers.first(name: "Content-Type") == "audio/ogg")
        var bytes = Data()
        let started = ContinuousClock.now
        for try await chunk in response.body {
            bytes.append(contentsOf: chunk.readableBytesView)
            if ContinuousClock.now - started > .seconds(3) { break }
        }
        let file = cluster.directory.file("listen.ogg")
        try bytes.write(to: URL(fileURLWithPath: file))
        #expect(bytes.prefix(4) == Data("OggS".utf8))

        // opusinfo (opus-tools) checks the headers and every page's CRC and sequence number.
        let report = try Self.run(["opusinfo", file])
        #expect(report.contains("Channels: 2"), "\(report)")
        for problem in ["CRC", "corrupt", "hole in data", "Invalid", "sequence"] {
            #expect(!report.contains(problem), "opusinfo: \(report)")
        }
        // The ffmpeg command line decodes it to the right tone.
        let samples = try MediaFixture.decodeMono(file)
        #expect(samples.count >= 48_000 * 2, "only \(samples.count) samples decoded")
        let heard = Spectrum.dominantFrequency(Array(samples.suffix(48_000)))
        #expect(abs(heard - 440) < 5, "heard \(heard) Hz")

        // A listener still connected does not hold the Router up when it is told to stop: its
        // stream ends, the Router exits 0 within the 5 s it is given (it used to wait for ever).
        let still = try await HTTPClient.shared.execute(
            HTTPClientRequest(url: listen + "?token=\(me.token)"), timeout: .seconds(30))
        var iterator = still.body.makeAsyncIterator()
        #expect(try await iterator.next() != nil)
        #expect(await cluster.router?.terminate() == true, "the Router did not stop with a listener connected")
        #expect(cluster.router?.exitCode == 0)
    }

    /// At each new track the Ogg stream is chained: the logical stream ends and a new one begins,
    /// its OpusTags carrying the new track's title, just before the track's first packet.
    /// opusinfo reads both streams, each with its title, and finds nothing wrong; decoded across
    /// the gapless join (opusdec, which follows chains), the sound never stops and the tone
    /// changes from 440 to 660 Hz.
    @Test func eachNewTrackBeginsAChainedStreamWithItsTitle() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 3)
        // The second track names its artist in its tags: the stream it begins carries it too.
        try MediaFixture.ffmpeg(
            ["-f", "lavfi", "-i", "sine=frequency=660:duration=3", "-ac", "2", "-metadata", "artist=The Tone Makers",
             cluster.mediaDirectory + "/tone-660.mp3"])
        try cluster.startEngine()
        try cluster.startRouter()
        defer { Task { [cluster] in await cluster.stop() } }
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() })
        let me = try await identity(cluster)
        #expect(try await cluster.play(me.session_id, "tone-440.mp3", token: me.token).status == 202)
        let queued = try await cluster.post(
            cluster.routerURL + "/api/sessions/\(me.session_id)/queue", #"{"url":"tone-660.mp3"}"#, token: me.token)
        #expect(queued.status == 200 || queued.status == 202, "\(queued)")
        try await observe(for: .milliseconds(300))

        func record(_ query: String) async throws -> Data {
            let response = try await HTTPClient.shared.execute(
                HTTPClientRequest(url: cluster.routerURL + "/listen/\(me.session_id).ogg?\(query)token=\(me.token)"),
                timeout: .seconds(30))
            #expect(response.status == .ok)
            var bytes = Data()
            let started = ContinuousClock.now
            for try await chunk in response.body {
                bytes.append(contentsOf: chunk.readableBytesView)
                if ContinuousClock.now - started > .milliseconds(4_200) { break }
            }
            return bytes
        }
        // Beside it, a listener that asked for no chains (`chain=0`) gets one stream throughout.
        async let chained = record("")
        async let unchained = record("chain=0&")
        // And one who arrives a second into the first track (after its `progress`) still gets its title.
        async let late: Data = {
            try await observe(for: .milliseconds(1_200))
            return try await record("")
        }()
        let file = cluster.directory.file("chained.ogg"), single = cluster.directory.file("single.ogg")
        let lateFile = cluster.directory.file("late.ogg")
        try await chained.write(to: URL(fileURLWithPath: file))
        try await unchained.write(to: URL(fileURLWithPath: single))
        try await late.write(to: URL(fileURLWithPath: lateFile))
        let lateReport = try Self.run(["opusinfo", lateFile])
        let lateTitles = lateReport.split(separator: "\n").filter { $0.lowercased().contains("title=") }
        #expect(lateTitles.first?.contains("440") == true, "a late listener's titles: \(lateTitles) \(lateReport)")
        let one = try Self.run(["opusinfo", single])
        #expect(one.components(separatedBy: "New logical stream").count - 1 == 1, "chain=0: \(one)")

        let report = try Self.run(["opusinfo", file])
        #expect(report.components(separatedBy: "New logical stream").count - 1 == 2, "opusinfo: \(report)")
        let titles = report.split(separator: "\n").filter { $0.lowercased().contains("title=") }
        #expect(titles.count == 2 && titles.last?.contains("660") == true, "titles: \(titles)")
        let artists = report.split(separator: "\n").filter { $0.lowercased().contains("artist=") }
        #expect(artists.count == 1 && artists.first?.contains("The Tone Makers") == true, "artists: \(artists)")
        for problem in ["CRC", "corrupt", "hole in data", "Invalid", "sequence"] {
            #expect(!report.contains(problem), "opusinfo: \(report)")
        }

        let wav = cluster.directory.file("chained.wav")
        _ = try Self.run(["opusdec", "--rate", "48000", file, wav])
        let samples = try MediaFixture.decodeMono(wav)
        #expect(samples.count > 48_000 * 3, "only \(samples.count) samples decoded")
        // Every 10 ms after the first frame holds the tone: the chain adds no gap at the join.
        let window = 480
        let quiet = stride(from: 960, to: samples.count - window, by: window).filter { start in
            let part = samples[start..<(start + window)]
            return (part.reduce(0) { $0 + $1 * $1 } / Float(window)).squareRoot() < 0.02
        }
        #expect(quiet.isEmpty, "quiet 10 ms windows at \(quiet.map { Double($0) / 48_000 }) s")
        #expect(abs(Spectrum.dominantFrequency(Array(samples.prefix(24_000))) - 440) < 5)
        #expect(abs(Spectrum.dominantFrequency(Array(samples.suffix(24_000))) - 660) < 5)
    }

    /// Runs a command line and gives back what it printed (both streams).
    static func run(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text
    }

    /// A listener that stops reading (a stalled player, or one that means harm) loses its own
    /// oldest packets, then is cut; a listener of the same session reading beside it gets its
    /// stream without a pause and hears the tone, and so does the session's bot, with the
    /// engine's pid and the Router's link unchanged.
    @Test func aListenerThatStopsReadingIsCutAndHoldsUpNobody() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 60)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let pid = try #require(cluster.engine?.pid)
        let bystander = SessionListener(session: "bystander", routerPort: cluster.routerPort, bot: true)
        defer { bystander.close() }
        #expect(await eventually { bystander.isConnected })
        #expect(try await cluster.play("bystander", "tone-440.mp3").status == 202)
        #expect(await bystander.hears(440))

        let path = "/listen/bystander.ogg?token=\(TonearmCluster.botToken)"
        let stalled = try StalledReader(port: cluster.routerPort, path: path)
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: cluster.routerURL + path), timeout: .seconds(30))
        var bytes = Data()
        var arrivals: [ContinuousClock.Instant] = []
        let started = ContinuousClock.now
        for try await chunk in response.body {
            bytes.append(contentsOf: chunk.readableBytesView)
            arrivals.append(.now)
            if ContinuousClock.now - started > .seconds(12) { break }
        }
        let gaps = zip(arrivals.dropFirst(), arrivals).map { milliseconds($0 - $1) }
        #expect(gaps.max() ?? 9_999 < 500, "the reading listener waited \(gaps.max() ?? 0) ms for its stream")
        let file = cluster.directory.file("beside.ogg")
        try bytes.write(to: URL(fileURLWithPath: file))
        let samples = try MediaFixture.decodeMono(file)
        #expect(samples.count >= 48_000 * 10, "only \(samples.count) samples in 12 s")
        #expect(abs(Spectrum.dominantFrequency(Array(samples.suffix(48_000))) - 440) < 5)

        #expect(stalled.closedByPeer(within: .seconds(5)), "the listener that reads nothing was not cut")
        let metrics = try await HTTPClient.shared.execute(HTTPClientRequest(url: cluster.routerURL + "/metrics"), timeout: .seconds(5))
        let text = String(buffer: try await metrics.body.collect(upTo: 1 << 20))
        #expect(text.contains("tonearm_router_slow_client_disconnects_total 1\n"), "\(text.split(separator: "\n").filter { $0.contains("slow") })")
        try await SlowSourceEndToEndTests.expectBystanderUntouched(cluster, bystander, pid: pid)
    }
}

/// A client that asks for `path` and never reads what comes: its receive buffer is kept small,
/// so the Router's side of the connection fills within seconds.
final class StalledReader {
    private let fd: Int32

    init(port: Int, path: String) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw FixtureError("socket() failed") }
        var size: Int32 = 4096
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        guard connected else { throw FixtureError("connect() failed") }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard send(fd, request, request.count, 0) == request.count else { throw FixtureError("send() failed") }
    }

    /// Whether the Router closes the connection within `timeout`: what it sent is read to the end.
    func closedByPeer(within timeout: Duration) -> Bool {
        var wait = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while ContinuousClock.now < deadline {
            let got = recv(fd, &buffer, buffer.count, 0)
            if got == 0 || (got < 0 && errno == ECONNRESET) { return true }
        }
        return false
    }

    deinit { close(fd) }
}
