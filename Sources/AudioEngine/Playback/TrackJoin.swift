// How a track joins the one that follows it: which track is opened ahead, whether the join has
// begun, how far its fade is, and the equal-power curves it mixes with. The pipeline reads the
// samples; this value decides what the join does with them.
import EngineAPI
import Foundation

struct TrackJoin {
    /// The track that plays after this one, opened ahead, and how the two join.
    struct Following {
        let playID: UInt64
        let pipeline: Pipeline
        /// Interleaved floats over which the two are mixed; 0 joins them on the sample.
        let fadeFloats: Int
    }

    /// Set while the play has a next track; fixed once the join has begun.
    private(set) var following: Following?
    /// The join in progress: floats of the fade done, of how many.
    private(set) var fade: (done: Int, total: Int)?
    /// What the last packet holds of a join: the next track's first samples (`started`), the
    /// last of this track's (`completed`).
    private(set) var started = false
    private(set) var completed = false

    /// Whether the join has begun (it can no longer be changed or called off).
    var isJoining: Bool { fade != nil }

    /// Plays `next` after this track (nil: nothing follows). Ignored once the join has begun.
    mutating func follow(with next: Following?) {
        guard fade == nil else { return }
        following = next
    }

    /// A new packet is being made: it holds no join's edge yet.
    mutating func newPacket() {
        started = false
        completed = false
    }

    /// Whether the fade into the next track starts with the next frame: the next track is open,
    /// a fade is asked for, and this track (at `position`) ends within it — at `end` floats (its
    /// cue-out), else at `durationMS`.
    func fadeBegins(position: Int64, durationMS: Int64?, end cueOut: Int64? = nil) -> Bool {
        guard fade == nil, let following, following.fadeFloats > 0, following.pipeline.isReady else { return false }
        let end: Int64
        if let cueOut {
            end = cueOut
        } else {
            guard let duration = durationMS, duration > 0 else { return false }
            end = 2 * MediaTime.samples(ms: duration)
        }
        return position + Int64(OpusEncoder.frameFloats) > end - Int64(following.fadeFloats)
    }

    /// The fade begins with this frame.
    mutating func beginFade() {
        guard let following else { return }
        fade = (0, following.fadeFloats)
        started = true
    }

    /// Mixes this frame of the fade: this track's `frame` falls as the next one's rises. Its
    /// last frame completes the join (this track is cut there, whatever is left of it).
    mutating func mix(_ frame: inout [Float], with next: [Float]) {
        guard let (done, total) = fade else { return }
        Self.crossfade(&frame, with: next, from: done, of: total)
        fade = (done + OpusEncoder.frameFloats, total)
        if done + OpusEncoder.frameFloats >= total { completed = true }
    }

    /// This track ended within the frame and the next one's first samples fill the rest: the
    /// join is gapless, begun and completed at once.
    mutating func joinOnTheSample() {
        fade = (0, 0)
        started = true
        completed = true
    }

    /// The next track's pipeline is taken over: nothing follows any more.
    mutating func handedOver() {
        following = nil
        fade = nil
    }

    /// Equal-power curves: this track's level falls as the cosine, the next one's rises as the
    /// sine, so the sum keeps its loudness through the fade. `done` and `total` are in floats.
    static func crossfade(_ frame: inout [Float], with next: [Float], from done: Int, of total: Int) {
        let pairs = min(frame.count, next.count) / 2
        for pair in 0..<pairs {
            let progress = min(Float(done / 2 + pair) / Float(max(total / 2, 1)), 1)
            let out = cos(progress * .pi / 2), into = sin(progress * .pi / 2)
            for channel in 0..<2 {
                let index = pair * 2 + channel
                frame[index] = frame[index] * out + next[index] * into
            }
        }
    }
}
