// The walking skeleton end to end: two sessions at once through the real binaries, heard by
// decoding what WebSocket clients receive; stop, replace, and an engine crash and restart.
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

/// Decodes packets with libopus and returns the left channel.
func decodeLeft(_ packets: [[UInt8]]) throws -> [Float] {
    let decoder = try OpusDecoder()
    var pcm: [Float] = []
    for packet in packets { pcm += try decoder.decode(packet) }
    return Spectrum.left(pcm)
}

/// The dominant frequency of the last `frames` packets.
func tone(of packets: [[UInt8]], lastFrames frames: Int = 50) throws -> Double {
    let decoded = try decodeLeft(packets)
    let tail = Array(decoded.suffix(frames * 960))
    return Spectrum.dominantFrequency(tail)
}

@Suite(.serialized, .timeLimit(.minutes(3))) struct SkeletonEndToEndTests {
    @Test func twoSessionsStopReplaceAndEngineRestart() async throws {
        let cluster = try TonearmCluster()
        try cluster.startEngine()
        try cluster.startRouter()
        defer { Task { [cluster] in await cluster.stop() } }
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() }, "Router never reached the engine")

        let a = SessionListener(session: "1234567890123456789", routerPort: cluster.routerPort)
        let b = SessionListener(session: "guild-b", routerPort: cluster.routerPort)
        #expect(await eventually { a.isConnected && b.isConnected })

        // Both sessions play at once, each its own tone.
        #expect(try await cluster.play(a.session, "tone-440.mp3").status == 202)
        #expect(try await cluster.play(b.session, "tone-880.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(10)) { a.audio().count >= 200 && b.audio().count >= 200 })

        for (listener, expected) in [(a, 440.0), (b, 880.0)] {
            let audio = listener.audio()
            let packets = audio.map(\.packet)
            // Every one-second window is the session's own tone: no cross-talk, ever.
            for window in stride(from: 0, to: packets.count - 50, by: 50) {
                let heard = try tone(of: Array(packets[window..<(window + 50)]))
                #expect(abs(heard - expected) < 5, "\(listener.session) heard \(heard) Hz in second \(window / 50)")
            }
            // 50 ± 2 frames per second, measured over three seconds after the first second.
            let start = audio[0].at + .seconds(1)
            let inWindow = audio.filter { $0.at >= start && $0.at < start + .seconds(3) }.count
            #expect((144...156).contains(inWindow), "\(listener.session): \(inWindow) frames in 3 s")
            let sessions = Set(listener.events().compactMap { $0["session_id"] as? String })
            #expect(sessions == [listener.session])
            #expect(listener.events().first?["type"] as? String == "ready")
        }

        // Stopping A: A gets `finished` (stopped) and no more audio; B keeps playing without a gap.
        let aMark = a.count, bMark = b.count
        #expect(try await cluster.stopSession(a.session).status == 200)
        try await observe(for: .seconds(1.5))
        let aAfter = a.all[aMark...]
        let finishedIndex = aAfter.firstIndex {
            if case .text(let t) = $0.message { t.contains(#""type":"finished""#) && t.contains(#""reason":"stopped""#) } else { false }
        }
        #expect(finishedIndex != nil, "A never got finished/stopped")
        if let finishedIndex {
            #expect(!a.all[(finishedIndex + 1)...].contains { if case .audio = $0.message { true } else { false } })
        }
        let bAfter = b.audio(from: bMark)
        #expect(bAfter.count >= 70, "B received only \(bAfter.count) frames in 1.5 s after A stopped")
        let gaps = zip(bAfter.dropFirst(), bAfter).map { $0.at - $1.at }
        #expect(gaps.max().map { $0 < .milliseconds(200) } ?? false, "B had a gap of \(String(describing: gaps.max()))")
        #expect(abs(try tone(of: bAfter.map(\.packet)) - 880) < 5)

        // A new play on A replaces A's audio.
        #expect(try await cluster.play(a.session, "tone-660.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(5)) { (try? abs(tone(of: a.audio().map(\.packet), lastFrames: 25) - 660) < 5) == true })
        let replaceMark = a.count
        #expect(try await cluster.play(a.session, "tone-440.mp3").status == 202)
        try await observe(for: .seconds(1.5))
        let replacedEvents = a.events(from: replaceMark)
        #expect(replacedEvents.contains { $0["type"] as? String == "finished" && $0["reason"] as? String == "replaced" })
        #expect(abs(try tone(of: a.audio(from: replaceMark).map(\.packet), lastFrames: 25) - 440) < 5)

        // The engine crashes; the Router notices, reconnects within 2 s of the engine's socket
        // reappearing, and a new play reaches the same WebSocket client.
        let killMark = a.count, killMarkB = b.count
        await cluster.engine?.kill()
        #expect(await eventually(timeout: .seconds(5)) { await !cluster.routerLinkUp() })
        try? FileManager.default.removeItem(atPath: cluster.socketPath)
        try cluster.startEngine()
        #expect(await eventually(timeout: .seconds(20)) { FileManager.default.fileExists(atPath: cluster.socketPath) })
        let socketUp = ContinuousClock.now
        #expect(await eventually(timeout: .seconds(5)) { await cluster.routerLinkUp() })
        let reconnect = ContinuousClock.now - socketUp
        print("router reconnected \(reconnect) after the engine's socket appeared")
        #expect(reconnect < .milliseconds(2_250), "reconnect took \(reconnect)")
        // A and B were playing when the engine died: their listeners are told the plays ended.
        for (listener, mark) in [(a, killMark), (b, killMarkB)] {
            #expect(
                await eventually(timeout: .seconds(6)) {
                    listener.events(from: mark).contains {
                        $0["code"] as? String == "engine_restarted" && $0["type"] as? String == "finished"
                    }
                }, "\(listener.session) was left playing in silence")
        }
        let restartMark = a.count
        #expect(try await cluster.play(a.session, "tone-880.mp3").status == 202)
        #expect(await eventually(timeout: .seconds(5)) { a.audio(from: restartMark).count >= 50 })
        #expect(abs(try tone(of: a.audio(from: restartMark).map(\.packet)) - 880) < 5)

        // Graceful shutdown: both exit 0 and the engine removes its socket.
        a.close()
        b.close()
        #expect(await cluster.router?.terminate() == true)
        #expect(await cluster.engine?.terminate() == true)
        #expect(cluster.router?.exitCode == 0)
        #expect(cluster.engine?.exitCode == 0)
        #expect(!FileManager.default.fileExists(atPath: cluster.socketPath))
    }

    @Test func routerAnswersWithJSONErrorsAndSurvivesAMissingEngine() async throws {
        let cluster = try TonearmCluster(tones: [440], seconds: 2)
        try cluster.startRouter()
        defer { Task { [cluster] in await cluster.stop() } }
        #expect(await eventually(timeout: .seconds(20)) { (try? await cluster.getJSON(cluster.routerURL + "/health")) != nil })
        // No engine yet: a play is 503 with a clear error, and the Router stays up.
        let unavailable = try await cluster.play("s1", "tone-440.mp3")
        #expect(unavailable.status == 503)
        #expect(unavailable.body.contains(#""code":"engine_unavailable""#))
        let badID = try await cluster.play("has%20space", "tone-440.mp3")
        #expect(badID.status == 400)
        #expect(badID.body.contains(#""code":"invalid_session_id""#))
        // The engine comes up later; the Router finds it and plays.
        try cluster.startEngine()
        #expect(await eventually(timeout: .seconds(20)) { await cluster.routerLinkUp() })
        let listener = SessionListener(session: "s1", routerPort: cluster.routerPort)
        #expect(await eventually { listener.isConnected })
        #expect(try await cluster.play("s1", "tone-440.mp3").status == 202)
        // The engine's own errors come through unchanged.
        let outside = try await cluster.play("s1", "../../etc/passwd")
        #expect(outside.status == 422)
        #expect(outside.body.contains(#""code":"outside_media_dir""#))
        #expect(await eventually(timeout: .seconds(5)) { listener.audio().count >= 20 })
        listener.close()
    }
}
