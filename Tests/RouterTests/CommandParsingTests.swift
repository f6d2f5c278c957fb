import EngineAPI
// Commands as REST bodies and WebSocket messages arrive: the same parser for both, so the same
// refusals, each naming the field.
import Foundation
import HTTPTypes
import ServiceSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct CommandParsingTests {
    func command(_ name: String, _ body: String) throws(APIError) -> SessionCommand {
        try CommandParsing.command(name, arguments: CommandParsing.arguments(Data(body.utf8)))
    }

    func refusal(_ name: String, _ body: String) -> APIError? {
        do {
            _ = try command(name, body)
            return nil
        } catch {
            return error
        }
    }

    @Test func everyCommandReadsItsArguments() throws {
        #expect(try command("play", #"{"url":" tone.mp3 "}"#) == .play(url: "tone.mp3"))
        #expect(try command("queue", #"{"url":"a.mp3"}"#) == .enqueue(url: "a.mp3"))
        #expect(try command("remove", #"{"index":2}"#) == .remove(index: 2))
        #expect(try command("jump", #"{"index":0}"#) == .jump(index: 0))
        #expect(try command("seek", #"{"position_ms":1500}"#) == .seek(positionMS: 1500))
        #expect(try command("volume", #"{"volume":40}"#) == .volume(40))
        #expect(try command("loop", #"{"mode":"queue"}"#) == .loop(.queue))
        #expect(try command("normalize", #"{"enabled":false}"#) == .normalize(false))
        #expect(try command("normalize", #"{"enabled":true}"#) == .normalize(true))
        #expect(try command("cue", #"{"enabled":true}"#) == .cue(true))
        #expect(
            try command("filters", #"{"equalizer":[{"band":8,"gain":0.25}]}"#)
                == .filters(Filters(equalizer: [EqualizerBand(band: 8, gain: 0.25)])))
        #expect(try command("filters", "{}") == .filters(Filters()))
        // Lavalink's other filters sit beside the equalizer; a field left out takes its default.
        #expect(
            try command("filters", #"{"tremolo":{"depth":0.8},"rotation":{"rotationHz":0.2},"lowPass":{}}"#)
                == .filters(Filters(tremolo: Tremolo(depth: 0.8), rotation: Rotation(rotationHz: 0.2), lowPass: LowPass())))
        for (name, expected) in [
            ("clear", SessionCommand.clear), ("next", .next), ("previous", .previous), ("pause", .pause),
            ("resume", .resume), ("stop", .stop), ("shuffle", .shuffle), ("unfollow", .unfollow),
        ] {
            #expect(try command(name, "") == expected)
            #expect(try command(name, #"{"ignored":true}"#) == expected)
        }
        #expect(try command("crossfade", #"{"crossfade_ms":3000}"#) == .crossfade(milliseconds: 3000))
        #expect(try command("follow", #"{"station":"radio","token":"t"}"#) == .follow(station: try SessionID("radio")))
        #expect(Set(CommandParsing.names).count == 20)
    }

    @Test func refusalsNameTheField() {
        #expect(refusal("play", "{}")?.code == "missing_url")
        #expect(refusal("follow", "{}")?.code == "missing_station")
        #expect(refusal("follow", #"{"station":"a b"}"#)?.code == "invalid_station")
        #expect(refusal("follow", #"{"station":""}"#)?.code == "invalid_station")
        #expect(refusal("follow", #"{"station":7}"#)?.code == "invalid_station")
        #expect(refusal("play", #"{"url":"   "}"#)?.code == "missing_url")
        #expect(refusal("play", #"{"url":"\#(String(repeating: "a", count: 4097))"}"#)?.code == "invalid_url")
        #expect(refusal("jump", #"{"index":"x"}"#)?.code == "invalid_index")
        #expect(refusal("jump", #"{"index":-1}"#)?.code == "invalid_index")
        #expect(refusal("remove", #"{"index":1000}"#)?.status == .badRequest)
        #expect(refusal("seek", #"{"position_ms":-1}"#)?.code == "invalid_position")
        #expect(refusal("loop", #"{"mode":"sometimes"}"#)?.code == "invalid_loop_mode")
        #expect(refusal("volume", "[1]")?.code == "invalid_json")
        #expect(refusal("normalize", "{}")?.code == "missing_enabled")
        #expect(refusal("normalize", #"{"enabled":"yes"}"#)?.code == "invalid_enabled")
        #expect(refusal("cue", "{}")?.code == "missing_enabled")
        #expect(refusal("volume", "not json")?.code == "invalid_json")
        // Filters: an entry without a field, a wrong type, a number no field holds — all in words.
        let noGain = refusal("filters", #"{"equalizer":[{"band":3}]}"#)
        #expect(noGain?.code == "invalid_filters" && noGain?.message.contains("\"gain\"") == true, "\(String(describing: noGain))")
        #expect(refusal("filters", #"{"equalizer":{"band":3}}"#)?.code == "invalid_filters")
        #expect(refusal("filters", #"{"equalizer":[{"band":"low","gain":0}]}"#)?.code == "invalid_filters")
        #expect(refusal("filters", #"{"equalizer":[{"band":1e30,"gain":0}]}"#)?.code == "invalid_filters")
        let notANumber = refusal("filters", #"{"karaoke":{"level":"all"}}"#)
        #expect(notANumber?.code == "invalid_filters" && notANumber?.message.contains("karaoke") == true, "\(String(describing: notANumber))")
        #expect(refusal("filters", #"{"vibrato":[]}"#)?.code == "invalid_filters")
        let unknown = refusal("dance", "")
        #expect(unknown?.status == .notFound && unknown?.code == "unknown_command")
        #expect(unknown?.message.contains("shuffle") == true)
    }

    /// A number no field can hold (schemathesis sent a queue index of 8.9 × 10^20) is that
    /// field's error, not "the body must be a JSON object".
    @Test func aNumberBeyondItsFieldIsThatFieldsError() {
        let refused = refusal("remove", #"{"index":894830320950131032064}"#)
        #expect(refused?.status == .badRequest)
        #expect(refused?.code == "invalid_index", "\(String(describing: refused))")
        #expect(refusal("seek", #"{"position_ms":1e300}"#)?.code == "invalid_position")
        #expect(refusal("volume", #"{"volume":-1e30}"#)?.code == "invalid_volume")
    }
}
