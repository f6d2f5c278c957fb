// Cue points on the real engine: tracks that begin and end with 2 s of silence and a fade-out
// join without a gap when the session's `cue` is on — gaplessly and over a crossfade, decoded and
// passed-through sources — and exactly as before when it is off.
import Foundation
import TestSupport
import Testing
import WireProtocol

@testable import AudioEngine

@Suite(.serialized, .timeLimit(.minutes(3))) struct CueEndToEndTests {
    /// 2 s of silence, 3 s of a tone at −6 dBFS whose last second fades out linearly, 2 s of silence.
    static func padded(_ frequency: Int, into directory: String, name: String, opus: Bool) throws {
        let wave = "if(between(t\\,2\\,5)\\,0.5*sin(2*PI*\(frequency)*t)*min(1\\,5-t)\\,0)"
        try MediaFixture.ffmpeg(
            ["-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=7"]
                + (opus ? ["-c:a", "libopus", "-b:a", "128k"] : []) + [directory + "/\(name)"])
    }

    /// The longest run of quiet 10 ms windows (left channel below −50 dBFS) between the first and
    /// the last window of sound, in ms.
    static func longestQuietMS(_ packets: [[UInt8]]) throws -> Int {
        let left = try decodeLeft(packets)
        let quiet = stride(from: 0, to: left.count - 480, by: 480).map { Spectrum.dBFS(Array(left[$0..<$0 + 480])) < -50 }
        guard let first = quiet.firstIndex(of: false), let last = quiet.lastIndex(of: false) else { return .max }
        var longest = 0, run = 0
        for isQuiet in quiet[first...last] {
            run = isQuiet ? run + 1 : 0
            longest = max(longest, run)
        }
        print("cue: longest quiet window \(longest * 10) ms")
        return longest * 10
    }

    /// Plays a then b (gapless or over `crossfadeMS`) with `cue`; the packets of both, b's `ready`.
    static func join(format: String, cue: Bool, crossfadeMS: Int) async throws -> (packets: [[UInt8]], ready: WireEvent, harness: EngineHarness) {
        let harness = try EngineHarness()
        try padded(440, into: harness.media, name: "a.\(format)", opus: format == "webm")
        try padded(880, into: harness.media, name: "b.\(format)", opus: format == "webm")
        try MediaFixture.tone(300, seconds: 20, into: harness.media, name: "bystander.mp3")
        let socket = try await harness.start()
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        let play = try await harness.post("/session/s/play", #"{"url":"a.\#(format)","normalize":false,"cue":\#(cue)}"#)
        #expect(play.status == 202, "\(play.json)")
        #expect(try await harness.get("/session/s").json["cue"] as? Bool == cue)
        let next = try await harness.post("/session/s/next", #"{"url":"b.\#(format)","crossfade_ms":\#(crossfadeMS)}"#)
        let second = try #require(next.json["play_id"] as? Int)
        #expect(await eventually(timeout: .seconds(20)) {
            socket.events("s").contains { $0.event.type == .finished && $0.event.playID == UInt64(second) }
        })
        let ready = try #require(socket.events("s").first { $0.event.type == .ready && $0.event.playID == UInt64(second) }).event
        let bystander = try await harness.get("/session/bystander")
        #expect((bystander.json["frames"] as? [String: Any])?["deficit"] as? Int == 0, "\(bystander.json)")
        #expect(harness.engine?.isRunning == true && socket.isActive)
        let packets = socket.packets("s").map(\.data)
        socket.close()
        return (packets, ready, harness)
    }

    @Test(arguments: ["wav", "webm"])
    func aGaplessJoinWithCueGoesFromTheFadeStraightIntoTheNextTracksSound(format: String) async throws {
        let (packets, ready, harness) = try await Self.join(format: format, cue: true, crossfadeMS: 0)
        defer { Task { await harness.stop() } }
        let quiet = try Self.longestQuietMS(packets)
        #expect(quiet <= 50, "a quiet window of \(quiet) ms at the join")
        // b is first heard at its cue-in, 2 s into the file, and says so.
        #expect(abs((ready.positionMS ?? 0) - 2_000) <= 20, "b's ready at \(ready.positionMS ?? -1) ms")
        // a's 3 s of tone (cue-in not applied to a play's start) then b's: about 5 s from a's sound to b's end.
        let left = try decodeLeft(packets)
        #expect(abs(Spectrum.dominantFrequency(Array(left[(2 * 48_000 + 9_600)..<(2 * 48_000 + 38_400)])) - 440) < 10)
        #expect(abs(Spectrum.dominantFrequency(Array(left[(5 * 48_000 + 9_600)..<(5 * 48_000 + 38_400)])) - 880) < 10)
    }

    @Test func aCrossfadeWithCueFadesOverTheSoundNotTheSilence() async throws {
        let (packets, _, harness) = try await Self.join(format: "wav", cue: true, crossfadeMS: 1_000)
        defer { Task { await harness.stop() } }
        let quiet = try Self.longestQuietMS(packets)
        #expect(quiet <= 50, "a quiet window of \(quiet) ms in the crossfade")
        // Mid-fade (a's cue-out about 4.98 s into it, the fade from 3.98 s) both tones sound.
        let left = try decodeLeft(packets)
        let middle = Array(left[(4 * 48_000 + 9_600)..<(4 * 48_000 + 28_800)])
        #expect(Spectrum.level(at: 440, middle) > -30 && Spectrum.level(at: 880, middle) > -30)
    }

    @Test func withCueOffTheSilenceIsPlayedAsBefore() async throws {
        let (packets, ready, harness) = try await Self.join(format: "wav", cue: false, crossfadeMS: 0)
        defer { Task { await harness.stop() } }
        let quiet = try Self.longestQuietMS(packets)
        // a's fade tail below −50 dBFS, its 2 s, b's 2 s: over 4 s of quiet.
        #expect(quiet >= 4_000, "the longest quiet window was \(quiet) ms")
        #expect(ready.positionMS == 0)
        let refused = try await harness.post("/session/s/cue", "{}")
        #expect(refused.status == 400 && (refused.json["error"] as? [String: Any])?["code"] as? String == "invalid_cue")
    }
}
