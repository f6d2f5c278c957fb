// How a client keeps up, counted the same way for every kind of client (a WebSocket's sink, an Ogg
// listener's stream): audio frames in windows of `frames`; a client that loses more than
// `dropLimit` of them within one window is too slow and is disconnected, with the same sentence
// whichever kind it is.

/// One client's current window of audio frames.
struct SlowClientWindow: Sendable {
    /// Frames per window (250: 5 s of audio).
    let frames: Int
    /// Frames a client may lose within one window (50: a fifth).
    let dropLimit: Int
    private(set) var framesInWindow = 0
    private(set) var droppedInWindow = 0

    init(frames: Int, dropLimit: Int) {
        self.frames = frames
        self.dropLimit = dropLimit
    }

    enum Outcome: Equatable {
        case counting
        /// A window ended; `dropped` of its frames were lost.
        case windowEnded(dropped: Int)
        /// Too many lost within this window: disconnect, saying `reason`.
        case tooSlow(dropped: Int, reason: String)
    }

    /// Counts one audio frame the client got (`lost`: or lost, its oldest dropped for it).
    mutating func count(lost: Bool) -> Outcome {
        framesInWindow += 1
        if lost { droppedInWindow += 1 }
        if droppedInWindow > dropLimit {
            return .tooSlow(
                dropped: droppedInWindow, reason: "too slow: lost \(droppedInWindow) of the last \(framesInWindow) audio frames")
        }
        guard framesInWindow >= frames else { return .counting }
        defer {
            framesInWindow = 0
            droppedInWindow = 0
        }
        return .windowEnded(dropped: droppedInWindow)
    }
}
