// Tonearm's Lavalink plugin without a server: its settings read from a plugin filter or a route
// body (every field checked, other plugins' filters left alone), its layer bodies, and the events
// of tracks given to Tonearm's queue through it.
import EngineAPI
import Foundation
import Testing

@testable import TonearmRouter

@Suite struct TonearmPluginTests {
    func object(_ text: String) throws -> JSONObject { try #require(LavalinkJSON.object(Array(text.utf8))) }

    @Test func theSettingsAreReadFromThePluginFilterAndEveryFieldIsChecked() throws {
        let update = try PlayerUpdate(try object(#"{"filters":{"pluginFilters":{"tonearm":{"normalize":false,"cue":true,"crossfadeMs":"2500"},"lavasrc":{"x":1}}}}"#))
        #expect(update.settings == TonearmSettings(normalize: false, cue: true, crossfadeMS: 2_500))
        #expect(update.settings?.commands == [.normalize(false), .cue(true), .crossfade(milliseconds: 2_500)])
        // Another plugin's filter alone, or none: no change of Tonearm's settings.
        #expect(try PlayerUpdate(try object(#"{"filters":{"pluginFilters":{"lavasrc":{}}}}"#)).settings == nil)
        #expect(try PlayerUpdate(try object(#"{"filters":{"pluginFilters":{}}}"#)).settings == nil)
        #expect(try PlayerUpdate(try object(#"{"filters":{}}"#)).settings == nil)
        for bad in [
            #"{"filters":{"pluginFilters":[]}}"#, #"{"filters":{"pluginFilters":{"tonearm":1}}}"#,
            #"{"filters":{"pluginFilters":{"tonearm":{"normalise":true}}}}"#, #"{"filters":{"pluginFilters":{"tonearm":{"normalize":1}}}}"#,
            #"{"filters":{"pluginFilters":{"tonearm":{"cue":"yes"}}}}"#, #"{"filters":{"pluginFilters":{"tonearm":{"crossfadeMs":12001}}}}"#,
            #"{"filters":{"pluginFilters":{"tonearm":{"crossfadeMs":-1}}}}"#, #"{"filters":{"pluginFilters":{"tonearm":{"crossfadeMs":1e300}}}}"#,
        ] {
            #expect(throws: LavalinkError.self, "\(bad) was taken") { try PlayerUpdate(try object(bad)) }
        }
        #expect(try TonearmSettings(try object(#"{}"#), field: "body").commands.isEmpty)
    }

    @Test func aLayerBodyIsCheckedAsTheEngineChecksItsOwn() throws {
        let layer = try TonearmPlugin.layerRequest(try object(#"{"identifier":"a.mp3","volume":80,"duckDb":20.5,"attackMs":10,"releaseMs":"900"}"#))
        #expect(layer == LayerRequest(url: "a.mp3", volume: 80, duckDB: 20.5, attackMS: 10, releaseMS: 900))
        for bad in [
            #"{}"#, #"{"identifier":""}"#, #"{"identifier":5}"#, #"{"identifier":"a","volume":1001}"#, #"{"identifier":"a","duckDb":61}"#,
            #"{"identifier":"a","duckDb":"x"}"#, #"{"identifier":"a","attackMs":-1}"#, #"{"identifier":"a","releaseMs":1e300}"#,
            #"{"identifier":"a","url":"b"}"#,
        ] {
            #expect(throws: LavalinkError.self, "\(bad) was taken") { try TonearmPlugin.layerRequest(try object(bad)) }
        }
    }

    static let playing: JSONObject = ["encoded": "p", "info": ["title": "p"] as JSONObject]
    static let first: JSONObject = ["encoded": "q1", "info": ["title": "q1"] as JSONObject]
    static let second: JSONObject = ["encoded": "q2", "info": ["title": "q2"] as JSONObject]

    func translate(_ event: JSONObject, _ tracks: inout LavalinkPlayer.Tracks) -> [String] {
        LavalinkPlayer.translate(event, guild: "1", tracks: &tracks).map {
            "\($0["type"] as? String ?? "") \(($0["track"] as? JSONObject)?["encoded"] as? String ?? "-") \($0["reason"] as? String ?? "")"
        }
    }

    @Test func theQueuesTracksStartInOrderAndEachBeforeEndsReplaced() {
        // A gapless join: the next play's `ready` comes before the previous play's `finished`.
        var tracks = LavalinkPlayer.Tracks(current: Self.playing, currentPlayID: 1, queued: [Self.first, Self.second])
        #expect(translate(["type": "ready", "play_id": 2], &tracks) == ["TrackEndEvent p replaced", "TrackStartEvent q1 "])
        #expect(translate(["type": "finished", "reason": "finished", "play_id": 1], &tracks).isEmpty)
        // An end that comes first: `replaced` while a queued track follows (mayStartNext false).
        #expect(translate(["type": "finished", "reason": "finished", "play_id": 2], &tracks) == ["TrackEndEvent q1 replaced"])
        #expect(translate(["type": "ready", "play_id": 3], &tracks) == ["TrackStartEvent q2 "])
        // The last one ends `finished`: the client's own queue may go on.
        #expect(translate(["type": "finished", "reason": "finished", "play_id": 3], &tracks) == ["TrackEndEvent q2 finished"])
        #expect(tracks.queued.isEmpty && tracks.current == nil)
    }

    @Test func aQueuedTrackThatFailsEndsLoadFailedAndTheNextIsNamedRight() {
        var tracks = LavalinkPlayer.Tracks(queued: [Self.first, Self.second])
        #expect(translate(["type": "finished", "reason": "error", "play_id": 4], &tracks) == ["TrackEndEvent q1 loadFailed"])
        #expect(translate(["type": "ready", "play_id": 5], &tracks) == ["TrackStartEvent q2 "])
        // A track the client asked for itself goes before the queue's.
        var asked = LavalinkPlayer.Tracks(pending: Self.playing, queued: [Self.first])
        #expect(translate(["type": "ready", "play_id": 6], &asked) == ["TrackStartEvent p "])
        #expect(asked.queued.count == 1)
    }
}
