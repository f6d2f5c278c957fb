// The settings of every play: the encoded lead, the encoder, the engine's limits.
import Foundation

/// How far ahead sessions encode, the encoder settings, and the engine's limits.
package struct PlaybackConfiguration: Sendable {
    /// Encoded lead in 20 ms frames. Volume changes reach the socket after at most this many
    /// frames, so it is kept small; the compressed read-ahead (seconds) absorbs network stalls.
    var leadFrames = 2
    /// Frames a worker encodes per visit to a session: it is called when the lead is down by
    /// this many. More per visit keeps a session's decoder, resampler and encoder in the cache
    /// while they work; the slack before a frame is due is `leadFrames − refillFrames` frames.
    var refillFrames = 1
    /// The lead while a play's packets pass through untouched (a few hundred bytes a frame, no
    /// encoder state), refilled when half of it has gone: slack for the workers at no cost. A
    /// change that needs the sound re-encoded takes back all but the first of them.
    var passthroughLeadFrames = 10
    var encoder = OpusEncoderConfiguration()
    /// Whether a new session's tracks are brought to `loudnessTarget` when its first play does not
    /// say (each session may turn it off).
    var normalizeByDefault = true
    /// Loudness normalisation's target, in LUFS.
    var loudnessTarget = LoudnessNormalizer.defaultTarget
    /// Sessions with a play in progress (extracting, streaming or paused) at once.
    package var maxSessions = 60
    /// A stopped, finished, errored or paused session is removed after this long.
    var idleTimeout: Duration = .seconds(300)
    /// Frames between `progress` events (50 = once a second).
    package var progressInterval: UInt64 = 50
    /// Deadlines in a row without a frame after which a streaming play is `stuck` (500 = 10 s,
    /// Lavalink's default `trackStuckThresholdMs`).
    package var stuckTicks: UInt64 = 500
    /// The encoding workers' nice value (0 = the same as the rest of the engine).
    var workerNice: Int32 = 10

    package init() {}
}
