// The design's acceptance scenarios T1–T4 and the playground's controls in a real browser:
// Debian's Chromium driven by Playwright (`Tests/Browser/playground.py`) against the real engine
// and Router, judging what each page decoded. Screenshots land in `.build/screenshots`.
import Foundation
import Testing
import TestSupport

@Suite struct BrowserEndToEndTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Starts both processes with tones, 2 s tones for the queue and a stepped tone for seeking.
    func cluster(environment: [String: String] = [:], tls: Bool = false) async throws -> TonearmCluster {
        let cluster = try TonearmCluster(tones: [440, 660, 880], seconds: 30, environment: environment, tls: tls)
        for frequency in [550, 770] {
            _ = try MediaFixture.tone(frequency, seconds: 2, into: cluster.mediaDirectory, name: "short-\(frequency).mp3")
        }
        _ = try Signal.steps(seconds: 12, into: cluster.mediaDirectory, name: "steps.mp3")
        try await cluster.startBoth()
        return cluster
    }

    /// Runs one scenario of the Playwright script; `onPlaying` runs when it prints `PLAYING`.
    func browse(
        _ cluster: TonearmCluster, _ scenario: String, url: String? = nil, arguments: [String] = [],
        onPlaying: @escaping @Sendable () async throws -> Void = {}
    ) async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            [
                "python3", Self.packageRoot.appendingPathComponent("Tests/Browser/playground.py").path,
                url ?? cluster.routerURL + "/", scenario,
                "--screenshots", Self.packageRoot.appendingPathComponent(".build/screenshots").path,
            ] + arguments
        let output = Pipe(), input = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = input
        try process.run()
        let reader = output.fileHandleForReading
        var transcript = ""
        var line = Data()
        while let byte = try await Task.detached(operation: { try reader.read(upToCount: 1) }).value, !byte.isEmpty {
            if byte != Data("\n".utf8) {
                line.append(byte)
                continue
            }
            let text = String(decoding: line, as: UTF8.self)
            transcript += text + "\n"
            line.removeAll()
            if text == "PLAYING" {
                try await onPlaying()
                try input.fileHandleForWriting.write(contentsOf: Data("go\n".utf8))
            }
        }
        while process.isRunning { try await Task.sleep(for: .milliseconds(20)) }
        print("browser \(scenario):\n\(transcript)")
        #expect(process.terminationStatus == 0, "\(scenario):\n\(transcript)")
    }

    @Test func t1AndT2TwoUsersHearOnlyTheirOwnTones() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "isolation")
    }

    @Test func t3StoppingOneTabLeavesTheOtherPlaying() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "stop")
    }

    @Test func t4PlayNowReplacesTheAudio() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "replace")
    }

    @Test func pauseVolumeMuteAndSeekFromThePage() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "controls")
    }

    @Test func theQueueAdvancesAndASecondTabJoinsWithinASecond() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "queue")
    }

    @Test func errorsInWordsAndTheLayoutAtPhoneAndDesktopWidths() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "errors")
    }

    @Test func botOperatorsSeeAndControlTheLiveGuilds() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "guilds")
    }

    /// The playground's "Link for listeners" opens `/radio/`, which plays the session's HLS
    /// (Media Source, and Chromium's own HLS) and shows each title when its track is heard.
    @Test func aListenerHearsTheSessionOverHLSWithEachTitleOnTime() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "radio")
    }

    @Test func wordsInTheBoxSearch() async throws {
        let fake = Self.packageRoot.appendingPathComponent("Tests/Fixtures/fake-yt-dlp").path
        let cluster = try await cluster(environment: ["TONEARM_YTDLP": fake])
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "search")
    }

    /// Plain HTTP on a host name (how a server is first reached after `docker-compose up`): no
    /// WebCodecs, Chromium's default autoplay policy, and only the page's own buttons.
    @Test func onPlainHTTPThePagesOwnButtonsAreHeard() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "plain_http", arguments: ["--insecure"])
    }

    /// A browser that has neither WebCodecs nor Opus in Media Source plays the session's Ogg
    /// stream in its <audio> element: heard, paused, resumed and changed.
    @Test func withoutOpusInMediaSourceTheOggStreamIsHeard() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "ogg")
    }

    /// Control → heard at p95 over 5 rounds (10 for docs/architecture.md's table: `--rounds 10`;
    /// every p95 measured there was under 310 ms, well inside the bound), on both players: Media Source on a host-name origin
    /// over plain HTTP, WebCodecs on 127.0.0.1 (a secure context). The figures are printed.
    @Test(arguments: [["--insecure"], []])
    func everyControlIsHeardWithin500Milliseconds(arguments: [String]) async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "latency", arguments: arguments + ["--rounds", "5"])
    }

    @Test func onPlainHTTPThePageFollowsAnEngineRestart() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "restart", arguments: ["--insecure"]) {
            await cluster.engine?.kill()
            try cluster.startEngine()
        }
    }

    /// The Router's own TLS with a certificate from an authority made for the test, which Chromium
    /// trusts: a host-name origin is then a secure context and the page decodes with WebCodecs.
    @Test func overHTTPSThePageUsesWebCodecs() async throws {
        let cluster = try await cluster(tls: true)
        defer { Task { [cluster] in await cluster.stop() } }
        let certificates = try #require(cluster.certificates)
        try await browse(
            cluster, "https", url: "https://tonearm.test:\(cluster.routerPort)/", arguments: ["--ca", certificates.authority])
    }

    @Test func thePageRecoversFromAStallWithoutAddingDelay() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "stall") {
            let pid = try #require(cluster.router?.pid)
            kill(pid, SIGSTOP)
            try await observe(for: .milliseconds(1500))
            kill(pid, SIGCONT)
        }
    }

    @Test func thePageRecoversWhenTheEngineRestarts() async throws {
        let cluster = try await cluster()
        defer { Task { [cluster] in await cluster.stop() } }
        try await browse(cluster, "restart") {
            await cluster.engine?.kill()
            try cluster.startEngine()
        }
    }
}
