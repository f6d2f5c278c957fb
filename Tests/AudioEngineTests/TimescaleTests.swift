import EngineAPI
import Foundation
import TestSupport
import Testing

@testable import AudioEngine

/// Lavalink's timescale as a listener hears it: the pitch, the tempo, the track's time, and no
/// click where it starts, changes or ends.
@Suite struct TimescaleTests {
    /// `samples` through a timescale stage in 20 ms frames, as the pipeline runs it: the output,
    /// and the source time each output frame said it covered (µs).
    static func stretched(_ samples: [Float], _ settings: Timescale) -> (output: [Float], micros: [Int]) {
        var stage = TimescaleStage(settings)
        var output: [Float] = [], micros: [Int] = []
        var frame = [Float](repeating: 0, count: OpusEncoder.frameFloats)
        var start = 0
        while true {
            if let covered = frame.withUnsafeMutableBufferPointer({ stage.pull(into: $0) }) {
                output += frame
                micros.append(covered)
                continue
            }
            guard start + OpusEncoder.frameFloats <= samples.count else { break }
            samples[start..<(start + OpusEncoder.frameFloats)].withUnsafeBufferPointer { stage.push($0) }
            start += OpusEncoder.frameFloats
        }
        return (output, micros)
    }

    /// The largest step from one sample to the next in `channel`.
    static func largestStep(_ channel: ArraySlice<Float>) -> Float {
        zip(channel, channel.dropFirst()).reduce(0) { max($0, abs($1.1 - $1.0)) }
    }

    /// A 440 Hz tone through each kind of timescale: the tone heard, how many frames it takes, the
    /// track time each frame says it covers, the level, and segments that join without a step.
    @Test(arguments: [
        (Timescale(pitch: 1.25), 550.0, 1.0),  // higher, same tempo
        (Timescale(speed: 1.5), 440.0, 1.5),  // faster, same pitch
        (Timescale(rate: 0.8), 352.0, 0.8),  // slower and lower together
    ])
    func theToneAndTheTempoAreAsAsked(settings: Timescale, hertz: Double, tempo: Double) {
        let source = FilterChainTests.tone(440, seconds: 4)
        let (output, micros) = Self.stretched(source, settings)
        let sourceFrames = Double(source.count / OpusEncoder.frameFloats)
        #expect(abs(Double(micros.count) - sourceFrames / tempo) <= 4, "\(micros.count) frames for \(sourceFrames) of source")
        #expect(micros.allSatisfy { $0 == Int(20_000 * tempo) }, "\(Set(micros))")
        let frequency = Spectrum.dominantFrequency(Spectrum.left(Array(output[96_000..<(96_000 + 2 * 65_536)])))
        #expect(abs(frequency - hertz) < 3, "\(frequency) Hz")
        // Joins in phase: no step larger than the tone's own at its new pitch (and a little).
        let own = Float(0.25 * 2 * Double.pi * hertz / 48_000)
        let step = Self.largestStep(Spectrum.left(output).dropFirst(959))
        #expect(step < own * 1.3, "largest step \(step), the tone's own \(own)")
        // The level holds (segments join in phase rather than cancelling).
        let levels = FilterChainTests.levels(Spectrum.left(output)).dropFirst(2).dropLast(4)
        #expect(levels.allSatisfy { abs($0 - Spectrum.dBFS(Spectrum.left(source))) < 0.5 }, "\(levels.min() ?? 0)…\(levels.max() ?? 0) dB")
    }

    /// Through the whole pipeline (decode, stretch, encode, decode): the track's time is the
    /// source's, all of it is heard (its last moments too), and turning the timescale on and off
    /// mid-track neither clicks nor skips.
    @Test func onAndOffMidTrackKeepTheTrackTimeAndDoNotClick() throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.tone(440, seconds: 3, into: directory.path, name: "tone.wav", sampleRate: 48_000, volume: 0.25)
        let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
        let decoder = try OpusDecoder()
        var pcm: [Float] = [], covered = 0, frame = 0
        while true {
            let filters = (40..<80).contains(frame) ? Filters(timescale: Timescale(speed: 1.5)) : Filters()
            guard case .value(let packet) = try pipeline.nextPacket(volume: 100, filters: filters) else { break }
            pcm += try decoder.decode(packet)
            covered += pipeline.lastSourceMicros
            frame += 1
        }
        // 40 plain frames, 40 at 1.5× (60 frames of source), then the remaining 50 plain.
        #expect(abs(frame - 130) <= 2, "\(frame) frames")
        #expect(abs(covered - 3_000_000) <= 40_000, "\(covered) µs of the track")
        let left = Spectrum.left(pcm)
        let own = Float(0.25 * 2 * Double.pi * 440 / 48_000)
        for join in [40, 80] {
            let largest = Self.largestStep(left[((join - 2) * 960)..<((join + 2) * 960)])
            #expect(largest < own * 1.5, "frame \(join): step \(largest), the tone's own \(own)")
        }
        // The tone plays to the end: its last 100 ms are there, at its level.
        let end = (frame - 8) * 960
        #expect(Spectrum.dBFS(Array(left[end..<(end + 4 * 960)])) > -16)
    }

    /// At half speed a one-second track lasts two seconds and ends with its own last moments.
    @Test func slowedTrackIsHeardToItsEnd() throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.tone(440, seconds: 1, into: directory.path, name: "tone.wav", sampleRate: 48_000, volume: 0.25)
        let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
        var frames = 0, covered = 0
        let filters = Filters(timescale: Timescale(speed: 0.5))
        while case .value = try pipeline.nextPacket(volume: 100, filters: filters) {
            frames += 1
            covered += pipeline.lastSourceMicros
        }
        #expect(abs(frames - 100) <= 3, "\(frames) frames")
        #expect(abs(covered - 1_000_000) <= 20_000, "\(covered) µs")
    }

    /// An Opus source is decoded while a timescale is on and goes back to passthrough (the
    /// source's own packets) once it is off, having dropped less than 20 ms of the track to do so.
    @Test func anOpusSourceReturnsToPassthroughWhenTheTimescaleEnds() throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("tone.webm")
        // A sweep, not a tone: a tone repeats, so the stretch can keep its windows on whole frames.
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "aevalsrc=0.25*sin(2*PI*(200*t+150*t*t)):s=48000:d=3", "-ac", "2", "-c:a", "libopus", file,
        ])
        let pipeline = try Pipeline(source: ResolvedSource(location: file, displayName: "t"), encoder: OpusEncoderConfiguration())
        var passthrough: [Bool] = [], covered = 0, frame = 0
        while true {
            let filters = (10..<40).contains(frame) ? Filters(timescale: Timescale(speed: 1.5)) : Filters()
            guard case .value = try pipeline.nextPacket(volume: 100, filters: filters) else { break }
            passthrough.append(pipeline.passthrough)
            covered += pipeline.lastSourceMicros
            frame += 1
        }
        #expect(passthrough[0..<10].allSatisfy { $0 })
        #expect(passthrough[10..<40].allSatisfy { !$0 })
        let back = try #require(passthrough[40...].firstIndex(of: true), "never passthrough again")
        #expect(back <= 45 && passthrough[back...].allSatisfy { $0 }, "passthrough again from frame \(back)")
        #expect((2_960_000...3_040_000).contains(covered), "\(covered) µs of the track")
    }

    @Test func factorsOutsideTheirRangeAreNamed() {
        #expect(Filters(timescale: Timescale(speed: 3)).problem == "timescale.speed is 3.0; it must be from 0.5 to 2.0")
        #expect(Filters(timescale: Timescale(rate: 0.1)).problem == "timescale.rate is 0.1; it must be from 0.5 to 2.0")
        #expect(Filters(timescale: Timescale(pitch: 2)).problem == nil)
        #expect(Filters(timescale: Timescale()).isEmpty)
        #expect(!Filters(timescale: Timescale(rate: 1.25)).isEmpty)
        #expect(Filters(timescale: Timescale(speed: 1.5, rate: 1.2)).sourceRate == 1.5 * 1.2)
    }
}
