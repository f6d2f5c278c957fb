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

    /// Every case at once on one engine, each in its own session, beside a bystander: a then b
    /// gaplessly with cue (WAV, and WebM/Opus passed through), over a 1 s crossfade with cue, and
    /// gaplessly with cue off, which must play the silence as before.
    @Test func joinsWithCueSkipTheSilenceAtTheEndsOfFilesAndWithoutItPlayItAsBefore() async throws {
        let harness = try EngineHarness()
        for format in ["wav", "webm"] {
            try Self.padded(440, into: harness.media, name: "a.\(format)", opus: format == "webm")
            try Self.padded(880, into: harness.media, name: "b.\(format)", opus: format == "webm")
        }
        try MediaFixture.tone(300, seconds: 30, into: harness.media, name: "bystander.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let pid = harness.engine?.pid
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        let cases: [(session: String, format: String, cue: Bool, crossfadeMS: Int)] = [
            ("gapless-wav", "wav", true, 0), ("gapless-webm", "webm", true, 0), ("crossfade", "wav", true, 1_000),
            ("off", "wav", false, 0),
        ]
        var second: [String: UInt64] = [:]
        for (session, format, cue, crossfadeMS) in cases {
            let play = try await harness.post("/session/\(session)/play", #"{"url":"a.\#(format)","normalize":false,"cue":\#(cue)}"#)
            #expect(play.status == 202, "\(play.json)")
            #expect(try await harness.get("/session/\(session)").json["cue"] as? Bool == cue)
            let next = try await harness.post("/session/\(session)/next", #"{"url":"b.\#(format)","crossfade_ms":\#(crossfadeMS)}"#)
            second[session] = try #require((next.json["play_id"] as? Int).map(UInt64.init))
        }
        #expect(await eventually(timeout: .seconds(25)) {
            second.allSatisfy { session, playID in
                socket.events(session).contains { $0.event.type == .finished && $0.event.playID == playID }
            }
        })
        for (session, _, cue, crossfadeMS) in cases {
            let packets = socket.packets(session).map(\.data)
            let ready = try #require(socket.events(session).first { $0.event.type == .ready && $0.event.playID == second[session] }).event
            let quiet = try Self.longestQuietMS(packets)
            let left = try decodeLeft(packets)
            if !cue {
                // a's fade tail below −50 dBFS, its 2 s, b's 2 s: over 4 s of quiet; b from its start.
                #expect(quiet >= 4_000, "\(session): the longest quiet window was \(quiet) ms")
                #expect(ready.positionMS == 0)
            } else if crossfadeMS > 0 {
                #expect(quiet <= 50, "\(session): a quiet window of \(quiet) ms in the crossfade")
                // Mid-fade (a's cue-out about 4.98 s into it, the fade from 3.98 s) both tones sound.
                let middle = Array(left[(4 * 48_000 + 9_600)..<(4 * 48_000 + 28_800)])
                #expect(Spectrum.level(at: 440, middle) > -30 && Spectrum.level(at: 880, middle) > -30, "\(session)")
            } else {
                #expect(quiet <= 50, "\(session): a quiet window of \(quiet) ms at the join")
                // b is first heard at its cue-in, 2 s into the file, and says so.
                #expect(abs((ready.positionMS ?? 0) - 2_000) <= 20, "\(session): b's ready at \(ready.positionMS ?? -1) ms")
                // a's 3 s of tone (a play's start is not cued) from 2 s, then b's from 5 s.
                #expect(abs(Spectrum.dominantFrequency(Array(left[(2 * 48_000 + 9_600)..<(2 * 48_000 + 38_400)])) - 440) < 10)
                #expect(abs(Spectrum.dominantFrequency(Array(left[(5 * 48_000 + 9_600)..<(5 * 48_000 + 38_400)])) - 880) < 10)
            }
        }
        let bystander = try await harness.get("/session/bystander")
        #expect((bystander.json["frames"] as? [String: Any])?["deficit"] as? Int == 0, "\(bystander.json)")
        #expect(harness.engine?.pid == pid && harness.engine?.isRunning == true && socket.isActive)
        let refused = try await harness.post("/session/off/cue", "{}")
        #expect(refused.status == 400 && (refused.json["error"] as? [String: Any])?["code"] as? String == "invalid_cue")
        socket.close()
    }
}
