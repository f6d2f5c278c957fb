import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import TestSupport
import Testing
import WireProtocol

/// `POST /session/{id}/next` on the real engine: the next track joins the current one on the
/// sample or over a crossfade, its events come in order, and a bystander session plays on.
@Suite(.serialized) struct JoinEndToEndTests {
    /// Two tones; the first 1.01 s long (not whole frames), as WAV (decoded and encoded) and as
    /// WebM/Opus (passed through untouched, so the join is between the sources' own packets).
    @Test(arguments: ["wav", "webm"])
    func theNextTrackFollowsWithoutAGapAndItsEventsComeInOrder(format: String) async throws {
        let harness = try EngineHarness()
        for (name, frequency, seconds) in [("a", 440, 1.01), ("b", 880, 1.0)] {
            let wave = "0.5*sin(2*PI*\(frequency)*t)"
            try MediaFixture.ffmpeg(
                ["-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=\(seconds)"]
                    + (format == "webm" ? ["-c:a", "libopus", "-b:a", "128k"] : []) + [harness.media + "/\(name).\(format)"])
        }
        try MediaFixture.tone(300, seconds: 10, into: harness.media, name: "bystander.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        let play = try await harness.post("/session/s/play", #"{"url":"a.\#(format)","normalize":false}"#)
        let first = try #require(play.json["play_id"] as? Int)
        let next = try await harness.post("/session/s/next", #"{"url":"b.\#(format)"}"#)
        #expect(next.status == 202, "\(next.json)")
        let second = try #require(next.json["play_id"] as? Int)
        #expect(await eventually(timeout: .seconds(10)) { socket.events("s").contains { $0.event.type == .finished && $0.event.playID == UInt64(second) } })
        let events = socket.events("s").map(\.event).filter { $0.type == .ready || $0.type == .finished }
        let seen = events.map { "\($0.type.rawValue) \($0.playID.map { Int($0) } ?? 0) \($0.reason?.rawValue ?? "")" }
        #expect(
            seen == ["ready \(first) ", "ready \(second) ", "finished \(first) finished", "finished \(second) finished"], "\(seen)")
        #expect(events[1].url == "b.\(format)")
        let left = try decodeLeft(socket.packets("s").map(\.data))
        // From the first packet to the second tone's end, no 2.5 ms is quiet (Opus's own priming
        // at the WebM's start and the encoder's look-ahead are skipped).
        let start = 960, end = 48_480 + 48_000 - 960
        var quiet: [Int] = []
        for window in stride(from: start, to: min(end, left.count - 120), by: 120)
        where Spectrum.rms(Array(left[window..<window + 120])) < 0.2 {
            quiet.append(window)
        }
        // Passed through, the join is between whole packets: the first track's last packet
        // carries its encoder's padding (168 samples here) and the second's first its pre-skip
        // (312), which only a decoder that trims could drop. That is the sources' own silence, at
        // most 10 ms; decoded sources join with none.
        let allowed = format == "webm" ? 4 : 0
        #expect(
            quiet.count <= allowed && (quiet.last ?? 0) - (quiet.first ?? 0) <= 120 * allowed,
            "quiet at samples \(Array(quiet.prefix(6))) of \(left.count); the join is near sample 48480")
        #expect(abs(Spectrum.dominantFrequency(Array(left[9_600..<38_400])) - 440) < 10)
        #expect(abs(Spectrum.dominantFrequency(Array(left[57_600..<86_400])) - 880) < 10)
        let info = try await harness.get("/session/bystander")
        #expect((info.json["frames"] as? [String: Any])?["deficit"] as? Int == 0, "\(info.json)")
        #expect(harness.engine?.isRunning == true)
        socket.close()
    }

    /// A 2 s crossfade: the next track's `ready` comes when the fade starts, 2 s before the first
    /// track's end; mid-fade both tones are heard; the first's `finished` comes at the fade's end.
    @Test func aCrossfadeMixesTheTracksAndEachEventComesWhenItIsHeard() async throws {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 4, into: harness.media, name: "a.mp3")
        try MediaFixture.tone(880, seconds: 4, into: harness.media, name: "b.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let play = try await harness.post("/session/s/play", #"{"url":"a.mp3","normalize":false}"#)
        let first = try #require(play.json["play_id"] as? Int)
        // Refused: outside 0…12,000.
        let refused = try await harness.post("/session/s/next", #"{"url":"b.mp3","crossfade_ms":12001}"#)
        #expect(refused.status == 400 && (refused.json["error"] as? [String: Any])?["code"] as? String == "invalid_crossfade")
        let next = try await harness.post("/session/s/next", #"{"url":"b.mp3","crossfade_ms":2000}"#)
        let second = try #require(next.json["play_id"] as? Int)
        #expect(await eventually(timeout: .seconds(12)) { socket.events("s").contains { $0.event.type == .finished && $0.event.playID == UInt64(second) } })
        let events = socket.events("s")
        let readyA = try #require(events.first { $0.event.type == .ready && $0.event.playID == UInt64(first) })
        let readyB = try #require(events.first { $0.event.type == .ready && $0.event.playID == UInt64(second) })
        let finishedA = try #require(events.first { $0.event.type == .finished && $0.event.playID == UInt64(first) })
        let startedAfter = readyB.at - readyA.at, endedAfter = finishedA.at - readyA.at
        #expect(startedAfter > .milliseconds(1_700) && startedAfter < .milliseconds(2_300), "ready for the next after \(startedAfter)")
        #expect(endedAfter > .milliseconds(3_700) && endedAfter < .milliseconds(4_300), "finished for the first after \(endedAfter)")
        let left = try decodeLeft(socket.packets("s").map(\.data))
        // 4 + 4 − 2 s.
        #expect(abs(left.count - 6 * 48_000) < 3 * 960, "\(Double(left.count) / 48_000) s heard")
        let middle = Array(left[144_000 - 2_400..<144_000 + 2_400])
        let at440 = Spectrum.level(at: 440, middle), at880 = Spectrum.level(at: 880, middle)
        #expect(abs(at440 - at880) < 2, "440 Hz at \(at440) dB and 880 Hz at \(at880) dB at the fade's middle")
        #expect(Spectrum.level(at: 880, Array(left[48_000..<52_800])) < at880 - 25)
        #expect(Spectrum.level(at: 440, Array(left[240_000..<244_800])) < at440 - 25)
        // Called off: the play asked to follow ends, and nothing follows.
        let third = try await harness.post("/session/t/play", #"{"url":"a.mp3"}"#)
        #expect(third.status == 202)
        let asked = try await harness.post("/session/t/next", #"{"url":"b.mp3"}"#)
        let askedID = try #require(asked.json["play_id"] as? Int)
        var request = HTTPClientRequest(url: harness.url + "/session/t/next")
        request.method = .DELETE
        let cancelled = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        #expect(cancelled.status == .ok)
        #expect(await eventually(timeout: .seconds(8)) { socket.events("t").filter { $0.event.type == .finished }.count == 2 })
        let ends = socket.events("t").filter { $0.event.type == .finished }.map { "\($0.event.playID ?? 0) \($0.event.reason?.rawValue ?? "")" }
        #expect(ends == ["\(askedID) stopped", "\(third.json["play_id"] as? Int ?? 0) finished"], "\(ends)")
        #expect(!socket.events("t").contains { $0.event.type == .ready && $0.event.playID == UInt64(askedID) })
        socket.close()
    }
}

extension JoinEndToEndTests {
    /// A stop, or a new play (a skip), in the middle of a fade ends both plays, each with its own
    /// `finished`, and nothing of either is heard after it.
    @Test(arguments: ["stop", "play"])
    func aStopOrAPlayDuringTheFadeEndsBothTracks(action: String) async throws {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 3, into: harness.media, name: "a.mp3")
        try MediaFixture.tone(880, seconds: 3, into: harness.media, name: "b.mp3")
        try MediaFixture.tone(660, seconds: 3, into: harness.media, name: "c.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let first = try #require(try await harness.post("/session/s/play", #"{"url":"a.mp3"}"#).json["play_id"] as? Int)
        let next = try await harness.post("/session/s/next", #"{"url":"b.mp3","crossfade_ms":2500}"#)
        let second = try #require(next.json["play_id"] as? Int)
        // The fade starts 0.5 s into the first track; half a second later both are heard.
        #expect(await eventually(timeout: .seconds(3)) {
            socket.events("s").contains { $0.event.type == .ready && $0.event.playID == UInt64(second) }
        })
        try await observe(for: .milliseconds(500))
        let mark = socket.count
        let reason: String
        if action == "stop" {
            #expect(try await harness.post("/session/s/stop").status == 200)
            reason = "stopped"
        } else {
            #expect(try await harness.post("/session/s/play", #"{"url":"c.mp3"}"#).status == 202)
            reason = "replaced"
        }
        #expect(await eventually(timeout: .seconds(2)) {
            socket.events("s", from: mark).filter { $0.event.type == .finished }.count >= 2
        })
        let ends = socket.events("s", from: mark).filter { $0.event.type == .finished }
            .map { "\($0.event.playID ?? 0) \($0.event.reason?.rawValue ?? "")" }
        #expect(Set(ends) == ["\(first) \(reason)", "\(second) \(reason)"] && ends.count == 2, "\(ends)")
        let ended = socket.count
        try await observe(for: .milliseconds(400))
        if action == "stop" {
            #expect(socket.packets("s", from: ended).isEmpty, "\(socket.packets("s", from: ended).count) packets after both ended")
            #expect(socket.events("s", from: ended).isEmpty)
        } else {
            // Only the new track is heard.
            let heard = try decodeLeft(Array(socket.packets("s", from: mark).suffix(15)).map(\.data))
            #expect(abs(Spectrum.dominantFrequency(heard) - 660) < 10)
            #expect(Spectrum.level(at: 440, heard) < Spectrum.level(at: 660, heard) - 30)
        }
        socket.close()
    }
}

/// The Router's queue with the real engine: the next track is opened ahead, so it follows
/// without a gap or fades in, and the queue moves on without starting it as a new play.
@Suite(.serialized) struct QueueJoinEndToEndTests {
    @Test func queuedTracksCrossfadeThenJoinOnTheSampleAsTheListenerHearsThem() async throws {
        let cluster = try TonearmCluster(tones: [])
        for (frequency, seconds) in [(440, 3.0), (660, 2.0), (880, 2.0)] {
            try MediaFixture.tone(frequency, seconds: seconds, into: cluster.mediaDirectory, name: "\(frequency).wav", sampleRate: 48_000)
        }
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let session = "guild-join"
        let bot = SessionListener(session: session, routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bot.isConnected })
        let fade = try await cluster.call(.POST, "/api/sessions/\(session)/crossfade", #"{"crossfade_ms":1000}"#)
        #expect(fade.status == 200 && fade.json["crossfade_ms"] as? Int == 1000, "\(fade.json)")
        let refused = try await cluster.call(.POST, "/api/sessions/\(session)/crossfade", #"{"crossfade_ms":-1}"#)
        #expect(refused.status == 400 && (refused.json["error"] as? [String: Any])?["code"] as? String == "invalid_crossfade")
        for name in ["440.wav", "660.wav", "880.wav"] {
            #expect(try await cluster.call(.POST, "/api/sessions/\(session)/queue", #"{"url":"\#(name)"}"#).status == 200)
        }
        // 3 s, faded over 1 s into 2 s, which joins 880 on the sample (crossfade 0 by then): 6 s.
        #expect(await eventually(timeout: .seconds(5)) { bot.states().contains { $0["current"] as? Int == 1 } })
        #expect(try await cluster.call(.POST, "/api/sessions/\(session)/crossfade", #"{"crossfade_ms":0}"#).status == 200)
        #expect(await eventually(timeout: .seconds(10)) { bot.states().last?["status"] as? String == "idle" })
        // The queue moved from one track to the next without starting it again: no `starting`
        // after the first track played.
        let statuses = bot.states().map { "\($0["current"] as? Int ?? -1) \($0["status"] as? String ?? "")" }
        let firstPlaying = try #require(statuses.firstIndex(of: "0 playing"), "\(statuses)")
        #expect(!statuses[firstPlaying...].contains { $0.hasSuffix("starting") }, "\(statuses)")
        #expect(statuses.contains("1 playing") && statuses.contains("2 playing"), "\(statuses)")
        let left = try decodeLeft(bot.audio().map(\.packet))
        #expect(abs(left.count - 6 * 48_000) < 5 * 960, "\(Double(left.count) / 48_000) s heard")
        // Mid-fade (2.5 s) both tones at about equal level; the 660 → 880 join is silent nowhere.
        let middle = Array(left[120_000 - 2_400..<120_000 + 2_400])
        let at440 = Spectrum.level(at: 440, middle), at660 = Spectrum.level(at: 660, middle)
        #expect(abs(at440 - at660) < 2, "mid-fade: 440 Hz at \(at440) dB, 660 Hz at \(at660) dB")
        var quiet: [Int] = []
        for window in stride(from: 960, to: min(left.count, 6 * 48_000) - 960, by: 120)
        where Spectrum.rms(Array(left[window..<window + 120])) < 0.05 {
            // The tones are at −9 dBFS, brought to −14 LUFS: an rms of 0.2; 0.05 is 12 dB below.
            quiet.append(window)
        }
        #expect(quiet.isEmpty, "quiet at samples \(Array(quiet.prefix(6))); the joins are near 96000 and 192000")
        bot.close()
    }
}
