// A play's timescale between its source and its renderer (engine-api.md "Filters"): present while
// a timescale is set, it takes the source's 20 ms frames and gives stretched ones, pushing
// silence after the source's end until it has played what it took.
import EngineAPI

struct TimescaleFeed {
    private(set) var stage: TimescaleStage?
    /// A source frame on its way into the stage.
    private var sourceFrame: [Float] = []
    /// The source ended under the timescale: silence goes in until the stage has played what it took.
    private var sourceEnded = false

    var isActive: Bool { stage != nil }

    /// Starts, changes or ends the timescale. Ended, it answers the source it took but did not
    /// play, to go back in front of the source, so the output goes on from where it was.
    mutating func set(_ settings: Timescale?) -> [Float]? {
        guard let settings, !settings.isIdentity else {
            guard let released = stage?.release() else { return nil }
            stage = nil
            // After the source's end this is its last moments and the silence that pushed them.
            sourceEnded = false
            return released
        }
        if stage == nil {
            stage = TimescaleStage(settings)
        } else {
            stage?.set(settings)
        }
        return nil
    }

    /// The next frame through the stage into `pcm`, and the source time it covers; `source`
    /// gives the next source frame.
    mutating func frame(into pcm: inout [Float], source: (inout [Float]) throws -> Next<Void>) throws -> Next<Int> {
        if pcm.count != OpusEncoder.frameFloats { pcm = [Float](repeating: 0, count: OpusEncoder.frameFloats) }
        if sourceFrame.count != OpusEncoder.frameFloats { sourceFrame = [Float](repeating: 0, count: OpusEncoder.frameFloats) }
        while true {
            if stage?.hasPlayedAll == true { return .end }
            if let micros = pcm.withUnsafeMutableBufferPointer({ stage?.pull(into: $0) }) ?? nil { return .value(micros) }
            if sourceEnded {
                sourceFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            } else {
                switch try source(&sourceFrame) {
                case .pending: return .pending
                case .value: break
                case .end:
                    // What the stage holds is still to be heard: silence pushes it out.
                    sourceEnded = true
                    stage?.sourceEnded()
                    sourceFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
                }
            }
            sourceFrame.withUnsafeBufferPointer { stage?.push($0) }
        }
    }

    /// The next track carries on with this one's stage (not with its source's end).
    mutating func carry(from other: TimescaleFeed) { stage = other.stage }

    /// The source was sought: the stage starts again, with the same settings.
    mutating func seeked() {
        if let settings = stage?.settings { stage = TimescaleStage(settings) }
        sourceEnded = false
    }
}
