// Layers and cue points through the Router: a bot lays a sound over its guild's music with one
// WebSocket command, and every client of the session — the bot and a playground tab — hears it in
// the same stream, with its events in order; the REST calls refuse what they must. With `cue` on,
// a queue of files padded with silence plays as one sound.
import AsyncHTTPClient
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@Suite(.serialized, .timeLimit(.minutes(3))) struct RouterSoundEndToEndTests {
    /// The mean level of `frequency` in the last `frames` packets.
    static func level(_ frequency: Double, lastFrames frames: Int, of listener: SessionListener) throws -> Double {
        Spectrum.level(at: frequency, try decodeLeft(listener.audio().suffix(frames).map(\.packet)))
    }

    /// `cue` through the Router: a queue of two tracks with 2 s of silence at each end and a
    /// fade-out plays as one sound to a bot, its state says so, and a new session has it off.
    @Test func theCueCommandJoinsTheQueueWithoutTheSilenceAtTheEndsOfFiles() async throws {
        let cluster = try TonearmCluster(tones: [])
        try CueEndToEndTests.padded(440, into: cluster.mediaDirectory, name: "a.mp3", opus: false)
        try CueEndToEndTests.padded(880, into: cluster.mediaDirectory, name: "b.mp3", opus: false)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let session = "guild-cue"
        #expect(try await cluster.state(session)["cue"] as? Bool == false, "off for a new session")
        let bot = SessionListener(session: session, routerPort: cluster.routerPort, bot: true)
        #expect(await eventually { bot.isConnected })
        try await bot.send(#"{"op":"cue","enabled":true,"id":1}"#)
        #expect((await bot.reply(1))?["state"].flatMap { ($0 as? [String: Any])?["cue"] as? Bool } == true)
        #expect(try await cluster.call(.POST, "/api/sessions/\(session)/normalize", #"{"enabled":false}"#).status == 200)
        for name in ["a.mp3", "b.mp3"] {
            #expect(try await cluster.call(.POST, "/api/sessions/\(session)/queue", #"{"url":"\#(name)"}"#).status == 200)
        }
        // a's 7 s with its last 2 s cut, b from its cue-in: both finished within about 10 s.
        #expect(await eventually(timeout: .seconds(15)) {
            bot.events().filter { $0["type"] as? String == "finished" && $0["reason"] as? String == "finished" }.count >= 2
        })
        let quiet = try CueEndToEndTests.longestQuietMS(bot.audio().map(\.packet))
        #expect(quiet <= 50, "a quiet window of \(quiet) ms between the two tracks")
        #expect(try await cluster.state(session)["cue"] as? Bool == true)
        bot.close()
    }

    static func code(_ json: [String: Any]) -> String? { (json["error"] as? [String: Any])?["code"] as? String }

    @Test func aBotLaysASoundOverTheMusicAndEveryClientHearsIt() async throws {
        let cluster = try TonearmCluster(tones: [440, 1_000], seconds: 12)
        try await cluster.startBoth()
        defer { Task { [cluster] in await cluster.stop() } }
        let session = "guild-layer"
        let bot = SessionListener(session: session, routerPort: cluster.routerPort, bot: true)
        let tab = SessionListener(session: session, routerPort: cluster.routerPort)
        #expect(await eventually { bot.isConnected && tab.isConnected })
        let idle = try await cluster.call(.POST, "/api/sessions/\(session)/layers", #"{"url":"tone-1000.mp3"}"#)
        #expect(idle.status == 409 && Self.code(idle.json) == "nothing_playing", "\(idle)")
        #expect(try await cluster.call(.POST, "/api/sessions/\(session)/play", #"{"url":"tone-440.mp3"}"#).status == 202)
        #expect(try await cluster.call(.POST, "/api/sessions/\(session)/normalize", #"{"enabled":false}"#).status == 200)
        #expect(await bot.hears(440))
        try await observe(for: .milliseconds(600))
        let alone = try Self.level(440, lastFrames: 25, of: bot)

        for (body, code) in [(#"{"url":"tone-1000.mp3","duck_db":70}"#, "invalid_duck"), (#"{"volume":50}"#, "missing_url")] {
            let refused = try await cluster.call(.POST, "/api/sessions/\(session)/layers", body)
            #expect(refused.status == 400 && Self.code(refused.json) == code, "\(body): \(refused)")
        }
        try await bot.send(#"{"op":"layer","url":"tone-1000.mp3","volume":50,"duck_db":12,"id":1}"#)
        let reply = try #require(await bot.reply(1))
        #expect(reply["ok"] as? Bool == true, "\(reply)")
        let layerID = try #require((reply["layer"] as? [String: Any])?["layer_id"] as? Int)
        try await observe(for: .milliseconds(1_000))
        for listener in [bot, tab] {
            let started = listener.events().first { $0["type"] as? String == "layer_started" }
            #expect(started?["layer_id"] as? Int == layerID, "\(listener.events().suffix(3))")
            // The tone files peak at 0.5 (−6 dBFS): the layer at 50 % is at −12, the track 12 dB down.
            let layer = try Self.level(1_000, lastFrames: 25, of: listener)
            let track = try Self.level(440, lastFrames: 25, of: listener)
            #expect(abs(layer - -12) < 1.5, "the layer at \(layer) dBFS")
            #expect(abs(alone - track - 12) < 1.5, "the track fell \(alone - track) dB")
        }
        try await bot.send(#"{"op":"layer_stop","layer_id":\#(layerID),"id":2}"#)
        #expect(await bot.reply(2)?["ok"] as? Bool == true)
        try await bot.send(#"{"op":"layer_stop","layer_id":\#(layerID),"id":3}"#)
        let again = try #require(await bot.reply(3))
        #expect((again["error"] as? [String: Any])?["code"] as? String == "layer_not_found", "\(again)")
        try await observe(for: .milliseconds(1_000))
        for listener in [bot, tab] {
            let ended = listener.events().first { $0["type"] as? String == "layer_ended" }
            #expect(ended?["layer_id"] as? Int == layerID && ended?["reason"] as? String == "stopped")
            #expect(try Self.level(1_000, lastFrames: 20, of: listener) < -50)
            #expect(abs(try Self.level(440, lastFrames: 20, of: listener) - alone) < 1)
        }
        // Over REST, the same.
        let added = try await cluster.call(.POST, "/api/sessions/\(session)/layers", #"{"url":"tone-1000.mp3"}"#)
        #expect(added.status == 202, "\(added)")
        let id = try #require(added.json["layer_id"] as? Int)
        #expect(try await cluster.call(.DELETE, "/api/sessions/\(session)/layers/\(id)").status == 200)
        #expect(try await cluster.call(.DELETE, "/api/sessions/\(session)/layers/\(id)").status == 404)
        #expect(try await cluster.call(.DELETE, "/api/sessions/\(session)/layers/x").status == 400)
        bot.close()
        tab.close()
    }
}
