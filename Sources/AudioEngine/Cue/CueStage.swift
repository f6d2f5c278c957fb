// A play's cue points as it plays (engine-api.md "Cue points"): with the session's `cue` on and a
// track to follow, where this track's sound ends (its tail decoded ahead and looked at), and, on
// the next track's side, its leading silence skipped. A value the pipeline asks and feeds; the
// samples and the decoder stay the pipeline's.

struct CueStage {
    /// The session's `cue`: joins go from this track's cue-out to the next one's cue-in.
    var enabled = false
    /// Where this track's sound ends, in floats from its start, once its tail was decoded ahead
    /// and looked at (`lookAtTail`); nil before, or when it plays to its end.
    private(set) var outFloats: Int64?
    private var tailLooked = false
    /// The next track's side: its leading silence is skipped (once), and how much of it so far.
    private var inDone = false
    private(set) var inFloats: Int64 = 0

    /// 2 s, in floats: how much earlier than its end by the duration the tail is looked at, and
    /// by how much more it may be longer.
    static let tailSlack = Int64(2 * 2 * 48_000)

    /// This track has a next one (fading over `fadeFloats`) and is within (fade + 10 s + 2 s) of
    /// its end by its duration: where its cue-out is looked for (an Opus source is decoded from
    /// here, not passed through).
    static func inTailWindow(position: Int64, durationMS: Int64?, fadeFloats: Int?) -> Bool {
        guard let fadeFloats, let duration = durationMS, duration > 0 else { return false }
        let remaining = 2 * MediaTime.samples(ms: duration) - position
        return remaining <= Int64(fadeFloats + CuePoints.limitFloats) + tailSlack
    }

    /// From the last (fade + 10 s + 2 s) of this track by its duration on, decodes the rest ahead
    /// half a second a frame (25 times as fast as it plays, never a burst) and, once it reaches
    /// the end, sets the cue-out where its sound ends. A fade then starts on time (its length
    /// before the cue-out), and a gapless join happens there. A track longer than its duration
    /// said by more than 2 s keeps its end.
    mutating func lookAtTail(
        _ samples: inout SourceSamples, _ decoder: MediaDecoder, durationMS: Int64?, fadeFloats: Int
    ) throws {
        guard !tailLooked, Self.inTailWindow(position: samples.position, durationMS: durationMS, fadeFloats: fadeFloats) else {
            return
        }
        let window = Int64(fadeFloats + CuePoints.limitFloats)
        guard samples.decoded.count < Int(window + 2 * Self.tailSlack) else {
            tailLooked = true
            return
        }
        guard case .value(true) = try samples.decodeAhead(decoder, floats: 48_000) else { return }
        tailLooked = true
        let end = samples.decoded.withUnsafeBufferPointer { CuePoints.endOfSound($0) }
        outFloats = samples.position + Int64(end)
    }

    /// Of `valid` floats read from `before` on, how many are still this track's sound (the rest
    /// lies past its cue-out, and is not heard).
    func heard(_ valid: Int, from before: Int64) -> Int {
        guard enabled, let cut = outFloats, before + Int64(valid) > cut else { return valid }
        return Int(max(0, cut - before))
    }

    /// The next 20 ms of a track's own samples after its leading silence, which is read and
    /// dropped first (once, at most 10 s of it): the frame starts at the first 10 ms of sound.
    mutating func readAfterLeadingSilence(
        _ samples: inout SourceSamples, _ decoder: MediaDecoder, into frame: inout [Float]
    ) throws -> Next<Int> {
        while !inDone {
            let read = try samples.readFrame(decoder, into: &frame)
            guard case .value(let count) = read else { return read }
            let first = frame.withUnsafeBufferPointer { CuePoints.firstSound(UnsafeBufferPointer(rebasing: $0[..<count])) }
            guard let first else {
                inFloats += Int64(count)
                if inFloats >= Int64(CuePoints.limitFloats) { inDone = true }
                continue
            }
            inDone = true
            inFloats += Int64(first)
            guard first > 0 else { return read }
            samples.unread(frame[first..<count])
        }
        return try samples.readFrame(decoder, into: &frame)
    }
}
