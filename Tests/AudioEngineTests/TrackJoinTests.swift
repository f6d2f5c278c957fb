// The join's decisions on the value: when a fade begins, how it mixes and when it completes,
// what a gapless join marks, and that a join once begun keeps its next track. The samples are
// plain numbers; only the next track's pipeline is a real (opened) file.
import EngineAPI
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

@Suite struct TrackJoinTests {
    let frame = OpusEncoder.frameFloats
    let directory: TemporaryDirectory
    /// The next track, opened.
    let next: Pipeline

    init() throws {
        directory = try TemporaryDirectory()
        let file = try MediaFixture.tone(880, seconds: 0.2, into: directory.path, name: "next.wav", sampleRate: 48_000)
        next = try Pipeline(source: ResolvedSource(location: file, displayName: "next"), encoder: OpusEncoderConfiguration())
    }

    @Test func aFadeBeginsWhenTheTrackEndsWithinIt() throws {
        var join = TrackJoin()
        #expect(!join.fadeBegins(position: 0, durationMS: 1_000), "nothing follows")
        join.follow(with: .init(playID: 2, pipeline: next, fadeFloats: 10 * frame))  // 200 ms
        let end = 2 * MediaTime.samples(ms: 1_000)
        #expect(!join.fadeBegins(position: end - Int64(11 * frame), durationMS: 1_000))
        #expect(join.fadeBegins(position: end - Int64(10 * frame), durationMS: 1_000))
        #expect(!join.fadeBegins(position: end, durationMS: nil), "a live stream's end is not known ahead")
        var gapless = TrackJoin()
        gapless.follow(with: .init(playID: 2, pipeline: next, fadeFloats: 0))
        #expect(!gapless.fadeBegins(position: end, durationMS: 1_000), "a gapless join waits for the track's end")
    }

    @Test func aFadeMixesAtEqualPowerAndCompletesOnItsLastFrame() throws {
        var join = TrackJoin()
        join.follow(with: .init(playID: 2, pipeline: next, fadeFloats: 3 * frame))
        join.newPacket()
        join.beginFade()
        #expect(join.started && join.isJoining && !join.completed)
        var levels: [(out: Float, into: Float)] = []
        for index in 0..<3 {
            if index > 0 { join.newPacket() }
            // This track alone (the next one silent), then the next one alone: each one's level.
            var falling = [Float](repeating: 1, count: frame)
            var rising = [Float](repeating: 0, count: frame)
            TrackJoin.crossfade(&rising, with: [Float](repeating: 1, count: frame), from: index * frame, of: 3 * frame)
            join.mix(&falling, with: [Float](repeating: 0, count: frame))
            levels.append((falling[frame / 2], rising[frame / 2]))
            #expect(join.completed == (index == 2), "frame \(index)")
            #expect(!join.started || index == 0)
        }
        for level in levels {
            #expect(abs(level.out * level.out + level.into * level.into - 1) < 0.001, "equal power: \(level)")
        }
        #expect(levels[0].out > levels[1].out && levels[1].out > levels[2].out, "this track falls")
    }

    @Test func aJoinOnceBegunKeepsItsNextTrackUntilHandedOver() throws {
        var join = TrackJoin()
        join.follow(with: .init(playID: 2, pipeline: next, fadeFloats: 0))
        join.joinOnTheSample()
        #expect(join.started && join.completed)
        join.follow(with: nil)
        #expect(join.following?.playID == 2, "a join begun cannot be called off")
        join.handedOver()
        #expect(join.following == nil && !join.isJoining)
        join.follow(with: .init(playID: 3, pipeline: next, fadeFloats: 0))
        #expect(join.following?.playID == 3)
    }
}
