// What passes from a play's worker to the pacer (the outbox's items), and a play asked to
// follow the current one.
import EngineAPI
import ServiceSupport
import WireProtocol

/// What the pacer finds at the head of a playback's outbox.
enum OutboxItem {
    /// The source opened; the pacer moves the session to Streaming and emits `ready`.
    case opened(MediaInfo, passthrough: Bool)
    /// An encoded frame, and the source time it covers in µs (20,000 but under a timescale);
    /// `rendered` is its number in the pipeline's renderer (nil when it passed through).
    case frame([UInt8], passthrough: Bool, sourceMicros: Int, rendered: UInt64?)
    /// The play is over: `finished` (source ended) or `error` (it failed).
    case end(FinishReason, APIError?)
    /// The next play is heard from the following frame (a gapless join or a crossfade's start):
    /// it becomes the session's play, and `ready` says so.
    case handover(NextPlay, MediaInfo, passthrough: Bool)
    /// The previous play's last samples went out (the join or the fade is complete): `finished`.
    case previousEnded(playID: UInt64)
    /// The next play could not be opened: `error` and `finished` for it; the current one goes on
    /// to its end.
    case nextFailed(playID: UInt64, APIError)
    /// A layer's first samples are in the following frame: `layer_started`.
    case layerStarted(UInt64)
    /// A layer ran out or failed (its last samples, if any, are in the frame before): `layer_ended`.
    case layerEnded(UInt64, FinishReason, APIError?)
}

/// A play asked to follow the current one.
struct NextPlay: Sendable {
    let playID: UInt64
    let url: String
    /// Interleaved floats of the crossfade (0: gapless).
    let fadeFloats: Int
    var metadata: TrackMetadata?
    /// nil while a page URL is being resolved.
    var source: ResolvedSource?
    /// Where in its track it is first heard, in ms: its cue-in when the join used cue points.
    var startMS: Int64 = 0
    /// Fires when this play is no longer wanted (replaced by another ask, called off, or the play
    /// it follows ended): its page resolution stops.
    let cancellation = CancellationSignal()
}
