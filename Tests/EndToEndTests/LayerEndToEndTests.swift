// Layers on the real engine: a sound mixed over a session's track, the track ducked under it and
// back after, read from the Opus the engine sends; a bystander session plays on beside it.
import Foundation
import TestSupport
import Testing
import EngineAPI
import WireProtocol

@testable import AudioEngine

@Suite(.serialized, .timeLimit(.minutes(3))) struct LayerEndToEndTests {
    /// The index, among `session`'s packets, of the first packet after the first `type` event.
    static func packetIndex(after type: EventType, _ session: String, in socket: SocketRecorder) -> Int? {
        var packets = 0
        for entry in socket.all {
            switch entry.message {
            case .audio(let packet) where packet.sessionID.description == session: packets += 1
            case .event(let event, _) where event.sessionID.description == session && event.type == type: return packets
            default: continue
            }
        }
        return nil
    }

    /// The level of `frequency` in each 20 ms packet, decoded in sequence (left channel).
    static func levels(at frequency: Double, _ packets: [[UInt8]]) throws -> [Double] {
        let decoder = try OpusDecoder()
        return try packets.map { Spectrum.level(at: frequency, Spectrum.left(try decoder.decode($0))) }
    }

    static func mean(_ values: ArraySlice<Double>) -> Double { values.reduce(0, +) / Double(max(values.count, 1)) }

    /// A 1 kHz layer at −12 dBFS over a 440 Hz track at −6 dBFS, decoded (MP3) or passed through
    /// (WebM/Opus): the layer is heard at its level, the track 12 dB down under it and back once
    /// the release is over, each edge a ramp, not a step; the Opus track passes through again after.
    @Test(arguments: ["mp3", "webm"])
    func aLayerIsHeardAtItsLevelOverTheDuckedTrackWhichComesBackAfter(format: String) async throws {
        let harness = try EngineHarness()
        try MediaFixture.ffmpeg(
            ["-f", "lavfi", "-i", "aevalsrc=0.5*sin(2*PI*440*t)|0.5*sin(2*PI*440*t):s=48000:d=14"]
                + (format == "webm" ? ["-c:a", "libopus", "-b:a", "128k"] : []) + [harness.media + "/track.\(format)"])
        try MediaFixture.tone(1_000, seconds: 2, into: harness.media, name: "layer.wav", sampleRate: 48_000, volume: 0.25)
        try MediaFixture.tone(300, seconds: 14, into: harness.media, name: "bystander.mp3")
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let pid = harness.engine?.pid
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        #expect(try await harness.post("/session/s/play", #"{"url":"track.\#(format)","normalize":false}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("s").count >= 75 })
        if format == "webm" { #expect(try await harness.get("/session/s").json["passthrough"] as? Bool == true) }

        let layer = try await harness.post("/session/s/layers", #"{"url":"layer.wav"}"#)
        #expect(layer.status == 202, "\(layer.json)")
        #expect(layer.json["duck_db"] as? Double == 12 && layer.json["attack_ms"] as? Int == 50 && layer.json["release_ms"] as? Int == 400)
        let layerID = try #require(layer.json["layer_id"] as? Int)
        #expect(await eventually(timeout: .seconds(6)) { socket.firstEvent("s", .layerEnded) != nil })
        // The release, then a second of the track alone.
        let ended = socket.packets("s").count
        #expect(await eventually(timeout: .seconds(5)) { socket.packets("s").count >= ended + 75 })

        let started = try #require(socket.firstEvent("s", .layerStarted)).event
        let end = try #require(socket.firstEvent("s", .layerEnded)).event
        #expect(started.layerID == UInt64(layerID) && end.layerID == UInt64(layerID) && end.reason == .finished)
        let first = try #require(Self.packetIndex(after: .layerStarted, "s", in: socket))
        let last = try #require(Self.packetIndex(after: .layerEnded, "s", in: socket))
        // 2 s of layer: 100 frames, give or take the one it ends in.
        #expect((99...101).contains(last - first), "the layer lasted \(last - first) frames")
        let packets = socket.packets("s").map(\.data)
        let track = try Self.levels(at: 440, packets)
        let layerTone = try Self.levels(at: 1_000, packets)
        let before = Self.mean(track[(first - 30)..<(first - 5)])
        let under = Self.mean(track[(first + 10)..<(last - 5)])
        let after = Self.mean(track[(last + 35)..<(last + 70)])
        let heard = Self.mean(layerTone[(first + 10)..<(last - 5)])
        #expect(abs(before - -6) < 1, "the track was at \(before) dBFS before the layer")
        #expect(abs(before - under - 12) < 1, "the track fell \(before - under) dB under the layer")
        #expect(abs(after - before) < 1, "the track came back to \(after) dBFS from \(before)")
        #expect(abs(heard - -12) < 1, "the layer was heard at \(heard) dBFS")
        #expect(Self.mean(layerTone[(first - 30)..<(first - 5)]) < -50 && Self.mean(layerTone[(last + 35)..<(last + 70)]) < -50)
        // The duck is a ramp: its first frame is between the levels (attack 50 ms), and the
        // release takes 400 ms: the track is still below its level 10 frames after the layer.
        // (A passed-through track's first encoded frame starts with the fresh encoder's look-ahead.)
        #expect(
            track[first...(first + 1)].contains { $0 < before - 0.5 && $0 > under + 0.5 },
            "attack frame at \(track[first]), \(before) → \(under): \(track[(first - 3)...(first + 4)].map { ($0 * 10).rounded() / 10 })")
        #expect(track[last + 10] < before - 2 && track[last + 10] > under + 2, "release frame at \(track[last + 10])")
        if format == "webm" {
            #expect(try await harness.get("/session/s").json["passthrough"] as? Bool == true, "the Opus track passes through again")
        }
        let bystander = try await harness.get("/session/bystander")
        #expect((bystander.json["frames"] as? [String: Any])?["deficit"] as? Int == 0, "\(bystander.json)")
        #expect(abs(try tone(of: socket.packets("bystander").map(\.data)) - 300) < 10)
        #expect(harness.engine?.pid == pid && harness.engine?.isRunning == true && socket.isActive)
        socket.close()
    }

    /// Two full-scale tones summed with normalisation on: the limiter keeps what the listener
    /// decodes at or below −1 dBTP while the layer sounds.
    @Test func aLoudLayerOverALoudTrackIsLimitedWithNormalisationOn() async throws {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 12, into: harness.media, name: "track.wav", sampleRate: 48_000, volume: 0.89)
        try MediaFixture.tone(1_000, seconds: 3, into: harness.media, name: "layer.wav", sampleRate: 48_000, volume: 0.89)
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        #expect(try await harness.post("/session/s/play", #"{"url":"track.wav","normalize":true}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("s").count >= 150 })
        let layer = try await harness.post("/session/s/layers", #"{"url":"layer.wav","volume":400,"duck_db":0}"#)
        #expect(layer.status == 202, "\(layer.json)")
        #expect(await eventually(timeout: .seconds(8)) { socket.firstEvent("s", .layerEnded) != nil })
        let first = try #require(Self.packetIndex(after: .layerStarted, "s", in: socket))
        let last = try #require(Self.packetIndex(after: .layerEnded, "s", in: socket))
        let decoder = try OpusDecoder()
        let all = try socket.packets("s").map(\.data).map { try decoder.decode($0) }
        let during = Array(all[first..<last].joined())
        let measured = try LoudnessMeasurement.measure(stereo: during)
        #expect(measured.truePeak <= -1, "true peak \(measured.truePeak) dBTP with the layer")
        #expect(Self.mean(try Self.levels(at: 1_000, socket.packets("s").map(\.data))[(first + 10)..<(last - 5)]) > -20)
        socket.close()
    }

    /// A layer whose server stalls for 3 s mid-way is silent meanwhile and goes on after: the
    /// track under it never misses a frame, nor does a bystander, and the engine is the same process.
    @Test func aStallingLayerNeverHoldsTheTrackUp() async throws {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 20, into: harness.media, name: "track.mp3")
        try MediaFixture.tone(300, seconds: 20, into: harness.media, name: "bystander.mp3")
        let served = try TemporaryDirectory(prefix: "tonearm-layer")
        try MediaFixture.tone(1_000, seconds: 8, into: served.path, name: "layer.wav", sampleRate: 48_000, volume: 0.25)
        // 192 kB a second of layer sent at 250 kB a second: the stall comes 4 s in, with about a
        // second of the layer read ahead, and lasts 3 s.
        let server = try MediaServer(
            root: served.path, arguments: ["--stall-at", "1000000", "--stall-seconds", "3", "--rate", "250000"])
        defer { server.stop() }
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        let pid = harness.engine?.pid
        #expect(try await harness.post("/session/bystander/play", #"{"url":"bystander.mp3"}"#).status == 202)
        #expect(try await harness.post("/session/s/play", #"{"url":"track.mp3","normalize":false}"#).status == 202)
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("s").count >= 50 })
        let asked = socket.packets("s").count
        let layer = try await harness.post("/session/s/layers", #"{"url":"\#(server.url("layer.wav"))"}"#)
        #expect(layer.status == 202, "\(layer.json)")
        #expect(await eventually(timeout: .seconds(14)) { socket.firstEvent("s", .layerEnded) != nil })
        #expect(socket.firstEvent("s", .layerEnded)?.event.reason == .finished)
        let first = try #require(Self.packetIndex(after: .layerStarted, "s", in: socket))
        let last = try #require(Self.packetIndex(after: .layerEnded, "s", in: socket))
        // 8 s of layer and about 2 s of stall: it lasted longer than 9 s, the track sounding throughout.
        // (Opening reads ahead first: at this rate, under a second.)
        #expect(first - asked < 75, "the layer started \(first - asked) frames after it was asked")
        #expect(last - first >= 450, "the layer lasted \(last - first) frames")
        let layerTone = try Self.levels(at: 1_000, socket.packets("s").map(\.data))
        #expect(layerTone[first..<last].contains { $0 < -50 }, "the layer was never silent: the stall did not bite")
        let track = try Self.levels(at: 440, socket.packets("s").map(\.data))
        #expect(track[first..<last].allSatisfy { $0 > -25 }, "the track fell silent under the stalled layer")
        for session in ["s", "bystander"] {
            let info = try await harness.get("/session/\(session)")
            #expect((info.json["frames"] as? [String: Any])?["deficit"] as? Int == 0, "\(session): \(info.json)")
        }
        #expect(harness.engine?.pid == pid && harness.engine?.isRunning == true && socket.isActive)
        socket.close()
    }

    /// Refusals: a bad field, a session playing nothing, a fifth layer, an unknown layer; and a
    /// layer called off ends at once with `stopped`, the track back at its level after the release.
    @Test func layerRequestsAreCheckedAndALayerCanBeCalledOff() async throws {
        let harness = try EngineHarness()
        try MediaFixture.tone(440, seconds: 12, into: harness.media, name: "track.mp3")
        try MediaFixture.tone(1_000, seconds: 8, into: harness.media, name: "layer.wav", sampleRate: 48_000, volume: 0.25)
        let socket = try await harness.start()
        defer { Task { await harness.stop() } }
        func code(_ response: (status: Int, json: [String: Any])) -> String? {
            (response.json["error"] as? [String: Any])?["code"] as? String
        }
        let idle = try await harness.post("/session/idle/layers", #"{"url":"layer.wav"}"#)
        #expect(idle.status == 404 && code(idle) == "session_not_found")
        #expect(try await harness.post("/session/s/play", #"{"url":"track.mp3","normalize":false}"#).status == 202)
        for (body, expected) in [
            (#"{"url":"layer.wav","duck_db":61}"#, "invalid_duck"), (#"{"url":"layer.wav","duck_db":-1}"#, "invalid_duck"),
            (#"{"url":"layer.wav","volume":1001}"#, "invalid_volume"), (#"{"url":"layer.wav","attack_ms":-5}"#, "invalid_attack"),
            (#"{"url":"layer.wav","release_ms":10001}"#, "invalid_release"), (#"{"volume":50}"#, "missing_url"),
        ] {
            let refused = try await harness.post("/session/s/layers", body)
            #expect(refused.status == 400 && code(refused) == expected, "\(body): \(refused.status) \(refused.json)")
        }
        for url in ["../../etc/passwd", "file:///etc/passwd"] {
            let refused = try await harness.post("/session/s/layers", #"{"url":"\#(url)"}"#)
            #expect(refused.status == 422, "\(url): \(refused)")
        }
        #expect(await eventually(timeout: .seconds(10)) { socket.packets("s").count >= 50 })
        var ids: [Int] = []
        for _ in 0..<LayerRequest.maxLayers {
            let added = try await harness.post("/session/s/layers", #"{"url":"layer.wav","volume":10}"#)
            #expect(added.status == 202)
            ids += [added.json["layer_id"] as? Int ?? -1]
        }
        let fifth = try await harness.post("/session/s/layers", #"{"url":"layer.wav"}"#)
        #expect(fifth.status == 409 && code(fifth) == "too_many_layers", "\(fifth.json)")
        #expect(await eventually(timeout: .seconds(3)) { socket.events("s").filter { $0.event.type == .layerStarted }.count == 4 })
        for id in ids { #expect(try await harness.delete("/session/s/layers/\(id)").status == 200) }
        let again = try await harness.delete("/session/s/layers/\(ids[0])")
        #expect(again.status == 404 && code(again) == "layer_not_found")
        let bad = try await harness.delete("/session/s/layers/abc")
        #expect(bad.status == 400 && code(bad) == "invalid_layer_id")
        #expect(await eventually(timeout: .seconds(2)) { socket.events("s").filter { $0.event.type == .layerEnded }.count >= 4 })
        let ends = socket.events("s").filter { $0.event.type == .layerEnded }.map(\.event)
        #expect(ends.count == 4 && ends.allSatisfy { $0.reason == .stopped }, "\(ends)")
        // Called off, nothing of the layers is heard a lead's frames on, and the track is back.
        let mark = socket.packets("s").count
        #expect(await eventually(timeout: .seconds(5)) { socket.packets("s").count >= mark + 50 })
        let levels = try Self.levels(at: 1_000, socket.packets("s").map(\.data))
        #expect(Self.mean(levels[(mark + 5)...]) < -50, "the layers were still heard at \(Self.mean(levels[(mark + 5)...])) dBFS")
        let track = try Self.levels(at: 440, socket.packets("s").map(\.data))
        #expect(abs(Self.mean(track[(mark + 30)...]) - -6) < 1, "\(track[(mark - 5)...].map { Int($0.rounded()) })")
        // A layer ends with its play: a stop ends it with `stopped`.
        let layer = try await harness.post("/session/s/layers", #"{"url":"layer.wav"}"#)
        let id = try #require(layer.json["layer_id"] as? Int)
        #expect(try await harness.post("/session/s/stop").status == 200)
        #expect(await eventually(timeout: .seconds(3)) { socket.events("s").contains { $0.event.type == .layerEnded && $0.event.layerID == UInt64(id) } })
        socket.close()
    }
}
