// The scheduling settings of the engine: defaults, ranges, and the one combination refused.
import Testing

@testable import AudioEngine

@Suite struct SchedulingConfigurationTests {
    @Test func defaultsPutThePacerFirstAndEncodeOneFrameAheadPerVisit() throws {
        let configuration = try EngineConfiguration(environment: [:])
        #expect(configuration.pacerRealtimePriority == 10)
        #expect(configuration.playback.workerNice == 10)
        #expect(configuration.playback.leadFrames == 2)
        #expect(configuration.playback.refillFrames == 1)
        #expect(configuration.playback.passthroughLeadFrames == 10)
    }

    @Test func eachCanBeSetOrTurnedOff() throws {
        let configuration = try EngineConfiguration(environment: [
            "TONEARM_PACER_PRIORITY": "0", "TONEARM_WORKER_NICE": "0", "TONEARM_ENCODE_LEAD_FRAMES": "6",
            "TONEARM_REFILL_FRAMES": "3", "TONEARM_PASSTHROUGH_LEAD_FRAMES": "25",
        ])
        #expect(configuration.playback.passthroughLeadFrames == 25)
        #expect(configuration.pacerRealtimePriority == nil)
        #expect(configuration.playback.workerNice == 0)
        #expect(configuration.playback.refillFrames == 3)
        #expect(try EngineConfiguration(environment: ["TONEARM_PACER_PRIORITY": "50"]).pacerRealtimePriority == 50)
    }

    @Test func valuesOutsideTheirRangesAreRefused() {
        for environment in [
            ["TONEARM_PACER_PRIORITY": "100"], ["TONEARM_PACER_PRIORITY": "-1"], ["TONEARM_WORKER_NICE": "20"],
            ["TONEARM_WORKER_NICE": "-5"], ["TONEARM_REFILL_FRAMES": "0"], ["TONEARM_PASSTHROUGH_LEAD_FRAMES": "0"],
            ["TONEARM_PASSTHROUGH_LEAD_FRAMES": "51"], ["TONEARM_REFILL_FRAMES": "x"],
            // A refill of the whole lead would leave nothing to send while the worker refills.
            ["TONEARM_ENCODE_LEAD_FRAMES": "4", "TONEARM_REFILL_FRAMES": "4"],
            ["TONEARM_REFILL_FRAMES": "2"],
        ] {
            #expect(throws: ConfigurationError.self, "\(environment)") { try EngineConfiguration(environment: environment) }
        }
    }
}
