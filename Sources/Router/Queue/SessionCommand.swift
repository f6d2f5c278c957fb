// What users and bots ask of a session, whichever way they ask (REST, WebSocket, bot link).
import EngineAPI
import WireProtocol

/// A command from a user or bot, the same over REST and WebSocket.
enum SessionCommand: Sendable, Equatable {
    case play(url: String)
    case enqueue(url: String)
    case remove(index: Int)
    case clear
    case jump(index: Int)
    case next
    case previous
    case pause
    case resume
    case stop
    case seek(positionMS: Int64)
    case volume(Int)
    case filters(Filters)
    /// Loudness normalisation on or off.
    case normalize(Bool)
    /// Cue points in joins on or off.
    case cue(Bool)
    /// How long each track is mixed into the next (0: they join on the sample).
    case crossfade(milliseconds: Int)
    case loop(LoopMode)
    case shuffle
    /// Hear another session (a station) instead of this one's own queue, which stops.
    case follow(station: SessionID)
    /// Stop following: this session's own queue is in charge again.
    case unfollow

    /// Whether the command is one a follower takes (the others are refused while it follows).
    var isAboutFollowing: Bool {
        switch self {
        case .follow, .unfollow: true
        default: false
        }
    }

    /// Whether the command can make the engine start a play (and so take one of its sessions).
    var mayStartPlay: Bool {
        switch self {
        case .play, .enqueue, .jump, .next, .previous, .resume: true
        case .remove, .clear, .pause, .stop, .seek, .volume, .filters, .normalize, .cue, .crossfade, .loop, .shuffle, .follow, .unfollow:
            false
        }
    }
}
