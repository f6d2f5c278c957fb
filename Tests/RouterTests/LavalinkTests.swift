// Lavalink's values without a server: lavaplayer's track format both ways (Lavalink's own
// documented example read back, strings only Java's modified UTF-8 writes as it does, hostile
// bytes refused), how the session's events become Lavalink's, and a player update's refusals.
import EngineAPI
import Foundation
import Testing

@testable import TonearmRouter

@Suite struct LavalinkTrackCodecTests {
    /// The track of Lavalink's WebSocket documentation (a version 2 track from its YouTube source).
    static let documented =
        "QAAAjQIAJVJpY2sgQXN0bGV5IC0gTmV2ZXIgR29ubmEgR2l2ZSBZb3UgVXAADlJpY2tBc3RsZXlWRVZPAAAAAAADPCAAC2RRdzR3OVdnWGNRAAEAK2h0dHBzOi8vd3d3LnlvdXR1YmUuY29tL3dhdGNoP3Y9ZFF3NHc5V2dYY1EAB3lvdXR1YmUAAAAAAAAAAA=="

    @Test func lavalinksDocumentedTrackReadsAsItsDocumentationSays() throws {
        let info = try LavalinkTrackCodec.decode(Self.documented)
        #expect(info.title == "Rick Astley - Never Gonna Give You Up")
        #expect(info.author == "RickAstleyVEVO")
        #expect(info.length == 212_000)
        #expect(info.identifier == "dQw4w9WgXcQ")
        #expect(info.uri == "https://www.youtube.com/watch?v=dQw4w9WgXcQ")
        #expect(info.sourceName == "youtube" && !info.isStream && info.isSeekable && info.position == 0)
        #expect(info.artworkUrl == nil && info.isrc == nil)
    }

    @Test func aTrackComesBackAsItWentWithTheBytesJavaWouldWrite() throws {
        let info = LavalinkTrackInfo(
            identifier: "http://127.0.0.1/a.mp3", isSeekable: true, author: "Nul\u{0}and 🎵 é", length: 61_000, isStream: false,
            position: 1_500, title: "Tonearm — tone", uri: "http://127.0.0.1/a.mp3", artworkUrl: "http://x/a.jpg", isrc: nil,
            sourceName: "http")
        let encoded = LavalinkTrackCodec.encode(info, probeInfo: "mp3")
        #expect(try LavalinkTrackCodec.decode(encoded) == info)
        let bytes = try #require(Data(base64Encoded: encoded))
        // Flag bit 30 and the size of what follows; version 3.
        #expect(bytes.prefix(4) == Data([0x40, 0x00, 0x00, UInt8(bytes.count - 4)]) && bytes[4] == 3)
        // NUL is two bytes (C0 80); 🎵 is two surrogates of three bytes each, never a 4-byte sequence.
        var author: [UInt8] = []
        LavalinkTrackCodec.writeUTF("\u{0}🎵", to: &author)
        #expect(author == [0x00, 0x08, 0xC0, 0x80, 0xED, 0xA0, 0xBC, 0xED, 0xBE, 0xB5])
    }

    @Test func hostileBytesAreRefusedNeverTrapped() {
        let valid = Array(Data(base64Encoded: Self.documented) ?? Data())
        var cases: [String] = ["", "not base64 !", Data([0x40, 0, 0, 0]).base64EncodedString()]
        // Every cut short, a header that claims more or less, a string longer than the track.
        for end in stride(from: 0, to: valid.count, by: 7) { cases.append(Data(valid.prefix(end)).base64EncodedString()) }
        var larger = valid
        larger[3] &+= 1
        cases.append(Data(larger).base64EncodedString())
        var longString = valid
        longString[6] = 0xFF
        cases.append(Data(longString).base64EncodedString())
        var badUTF = valid
        badUTF[7] = 0xF8
        cases.append(Data(badUTF).base64EncodedString())
        var version = valid
        version[4] = 9
        cases.append(Data(version).base64EncodedString())
        for encoded in cases {
            #expect(throws: LavalinkTrackCodec.Unreadable.self) { try LavalinkTrackCodec.decode(encoded) }
        }
    }
}

@Suite struct LavalinkEventTests {
    static let track: JSONObject = ["encoded": "e", "info": ["title": "a"] as JSONObject]
    static let next: JSONObject = ["encoded": "n", "info": ["title": "b"] as JSONObject]

    func translate(_ event: JSONObject, _ tracks: inout LavalinkPlayer.Tracks) -> [(type: String, reason: String?, track: String?)] {
        LavalinkPlayer.translate(event, guild: "1", tracks: &tracks).map {
            ($0["type"] as? String ?? "", $0["reason"] as? String, ($0["track"] as? JSONObject)?["encoded"] as? String)
        }
    }

    @Test func aTrackStartsEndsAndIsReplacedAsLavalinkSaysIt() {
        var tracks = LavalinkPlayer.Tracks(pending: Self.track)
        #expect(translate(["type": "ready", "play_id": 1], &tracks).map(\.type) == ["TrackStartEvent"])
        // The same play's `ready` again (it is not a new track) makes nothing.
        #expect(translate(["type": "ready", "play_id": 1], &tracks).isEmpty)
        // Replaced: the old track ends `replaced`, the new one starts.
        tracks.pending = Self.next
        let replaced = translate(["type": "finished", "reason": "replaced", "play_id": 1], &tracks)
        #expect(replaced.map(\.reason) == ["replaced"] && replaced.map(\.track) == ["e"])
        #expect(translate(["type": "ready", "play_id": 2], &tracks).map(\.track) == ["n"])
        for (tonearm, lavalink) in [("finished", "finished"), ("stopped", "stopped"), ("cleanup", "cleanup"), ("error", "loadFailed")] {
            var playing = LavalinkPlayer.Tracks(current: Self.track, currentPlayID: 7)
            #expect(translate(["type": "finished", "reason": tonearm, "play_id": 7], &playing).map(\.reason) == [lavalink])
            #expect(playing.current == nil && playing.pending == nil)
        }
    }

    /// A play stopped just before the client asked for another (its session ended, another took
    /// the guild): its `finished` is not the end of the track asked for, which then starts.
    @Test func aGuildThatMovesPairsKeepsItsTrackWithoutAWord() {
        // At the pair it leaves: the play ends for the hand-over (or its fence), not for the client.
        var leaving = LavalinkPlayer.Tracks(current: ["encoded": "c"], currentPlayID: 4)
        for code in ["handed_over", "fenced"] {
            #expect(translate(["type": "finished", "reason": "stopped", "code": code, "play_id": 4], &leaving).isEmpty)
        }
        #expect(leaving.current != nil)
        // At the pair that takes it on: the player from its row; the play going on there starts
        // nothing new, and ends as any other.
        var row = LavalinkCluster.tracks(LavalinkCluster.row(leaving))
        #expect(row.continuing && row.current?["encoded"] as? String == "c")
        #expect(translate(["type": "ready", "play_id": 1], &row).isEmpty && row.currentPlayID == 1 && !row.continuing)
        #expect(translate(["type": "finished", "reason": "finished", "play_id": 1], &row).map(\.reason) == ["finished"])
        #expect(translate(["type": "ready", "play_id": 2], &row).isEmpty)  // a track the client did not give
    }

    @Test func anOlderPlaysEndDoesNotEndTheTrackAskedFor() {
        var tracks = LavalinkPlayer.Tracks(pending: Self.next)
        #expect(translate(["type": "finished", "reason": "stopped", "play_id": 3], &tracks).isEmpty)
        #expect(translate(["type": "ready", "play_id": 4], &tracks).map(\.track) == ["n"])
        #expect(translate(["type": "finished", "reason": "stopped", "play_id": 3], &tracks).isEmpty && tracks.current != nil)
        // A track that never started ends `loadFailed` on its play's error.
        var failing = LavalinkPlayer.Tracks(pending: Self.next)
        #expect(translate(["type": "finished", "reason": "error", "play_id": 5], &failing).map(\.reason) == ["loadFailed"])
    }

    @Test func aLinkThatCannotBeLoadedEndsLoadFailedAfterItsException() {
        var tracks = LavalinkPlayer.Tracks(pending: Self.track)
        let events = translate(["type": "error", "code": "source_timeout", "message": "m", "url": "http://x"], &tracks)
        #expect(events.map(\.type) == ["TrackExceptionEvent", "TrackEndEvent"] && events.last?.reason == "loadFailed")
        // An engine error while playing: the exception only; `finished` (error) ends it.
        var playing = LavalinkPlayer.Tracks(current: Self.track, currentPlayID: 1)
        #expect(translate(["type": "error", "code": "decode_failed", "message": "m"], &playing).map(\.type) == ["TrackExceptionEvent"])
    }

    @Test func aStalledSourceIsATrackStuckEventWithTheEnginesThreshold() {
        var playing = LavalinkPlayer.Tracks(current: Self.track, currentPlayID: 7)
        let stuck = LavalinkPlayer.translate(["type": "stuck", "play_id": 7, "duration_ms": 1_000, "position_ms": 4_000], guild: "1", tracks: &playing)
        #expect(stuck.count == 1 && stuck.first?["type"] as? String == "TrackStuckEvent" && stuck.first?["thresholdMs"] as? Int == 1_000)
        #expect((stuck.first?["track"] as? JSONObject)?["encoded"] as? String == "e" && playing.current != nil)
        // An older play's stall, or one with no track of the client's, is not news.
        #expect(translate(["type": "stuck", "play_id": 6, "duration_ms": 1_000], &playing).isEmpty)
        var idle = LavalinkPlayer.Tracks()
        #expect(translate(["type": "stuck", "play_id": 7, "duration_ms": 1_000], &idle).isEmpty)
    }

    @Test func theVoiceConnectionsEndIsAWebSocketClosedEventWithDiscordsCode() {
        var tracks = LavalinkPlayer.Tracks()
        #expect(translate(["type": "voice_state", "state": "connected"], &tracks).isEmpty && tracks.connected)
        let closed = LavalinkPlayer.translate(["type": "voice_state", "state": "disconnected", "code": 4014], guild: "1", tracks: &tracks)
        #expect(closed.first?["type"] as? String == "WebSocketClosedEvent" && closed.first?["code"] as? Int == 4014)
        #expect(!tracks.connected)
        // Events nobody asked for (another client's track) make nothing.
        var empty = LavalinkPlayer.Tracks()
        #expect(translate(["type": "ready"], &empty).isEmpty && translate(["type": "progress"], &empty).isEmpty)
    }
}

@Suite struct PlayerUpdateTests {
    func refusal(_ json: String) -> String? {
        guard let object = LavalinkJSON.object(Array(json.utf8)) else { return "not an object" }
        do {
            _ = try PlayerUpdate(object)
            return nil
        } catch {
            return error.message
        }
    }

    @Test func everyFieldIsCheckedBeforeAnythingIsDone() throws {
        for bad in [
            #"{"volume":1001}"#, #"{"volume":-1}"#, #"{"volume":50.5}"#, #"{"volume":true}"#, #"{"volume":"5e1"}"#,
            #"{"position":"-1"}"#, #"{"position":" 20"}"#, #"{"position":""}"#, #"{"position":"9223372036854775808"}"#, #"{"position":"-9223372036854775808"}"#,
            #"{"position":-1}"#, #"{"position":1e300}"#, #"{"paused":1}"#, #"{"paused":"yes"}"#, #"{"endTime":0}"#, #"{"endTime":-1}"#,
            #"{"endTime":true}"#, #"{"endTime":2.5}"#,
            #"{"track":"x"}"#, #"{"track":{"encoded":5}}"#, #"{"track":{"encoded":"QUFB"}}"#, #"{"track":{"identifier":""}}"#,
            #"{"track":{"identifier":"a","userData":[1]}}"#, #"{"filters":[]}"#, #"{"filters":{"timescale":{"speed":-1}}}"#,
            #"{"voice":"x"}"#, #"{"filters":{"volume":5.5}}"#, #"{"filters":{"volume":-0.1}}"#, #"{"filters":{"volume":true}}"#,
            #"{"filters":{"volume":"half"}}"#,
        ] {
            #expect(refusal(bad) != nil, "\(bad) was taken")
        }
        let update = try PlayerUpdate(
            try #require(LavalinkJSON.object(Array(#"{"volume":0,"paused":false,"position":0,"endTime":null,"track":{"encoded":null},"filters":{"volume":1.0}}"#.utf8))))
        #expect(update.volume == 0 && update.paused == false && update.position == 0)
        guard case .stop = update.track else { Issue.record("encoded null is a stop"); return }
        // A number written as a string, as kotlinx.serialization reads it and pomice sends it.
        let quoted = try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{"position":"20000","volume":"50"}"#.utf8))))
        #expect(quoted.position == 20_000 && quoted.volume == 50)
        // Lavalink's volume filter: a factor on the player's volume; given filters without it set it back to 1.
        let half = try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{"filters":{"volume":0.5,"timescale":{"pitch":1.5}}}"#.utf8))))
        #expect(half.filterVolume == 0.5 && half.filters?.timescale?.pitch == 1.5)
        #expect(try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{"filters":{}}"#.utf8)))).filterVolume == 1)
        #expect(try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{"volume":80}"#.utf8)))).filterVolume == nil)
        // endTime: a position, null (where the track ends), or left out (no change).
        #expect(try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{"endTime":3000}"#.utf8)))).endTime == .some(3_000))
        #expect(try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{"endTime":null}"#.utf8)))).endTime == .some(nil))
        #expect(try PlayerUpdate(try #require(LavalinkJSON.object(Array(#"{}"#.utf8)))).endTime == nil)
    }

    @Test func theEnginePlaysAtTheProductOfTheVolumeAndTheVolumeFilter() {
        #expect(PlayerUpdate.engineVolume(100, filter: 0.5) == 50)
        #expect(PlayerUpdate.engineVolume(333, filter: 1.5) == 500)
        #expect(PlayerUpdate.engineVolume(1_000, filter: 5) == 1_000)
        #expect(PlayerUpdate.engineVolume(400, filter: 0) == 0)
        #expect(PlayerUpdate.engineVolume(100, filter: 1) == 100)
    }
}
