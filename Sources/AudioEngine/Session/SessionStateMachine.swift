// The life of one session as a value: Idle → Extracting → Streaming ⇄ Paused → Stopped, and
// Extracting → Error. Each input returns the action the I/O layer carries out, or a refusal
// that the control API turns into 409. No I/O here, so every transition is unit-tested.
import EngineAPI

/// A session's state and current play, and the rules for moving between states.
struct SessionStateMachine: Sendable, Equatable {
    enum Input: Equatable {
        /// A new play was requested (it replaces any current play).
        case play(playID: UInt64)
        /// The play's source opened; its first frame is on the way.
        case opened(playID: UInt64)
        /// The play failed (could not open, or broke mid-stream).
        case failed(playID: UInt64)
        /// The source ran out and its last frame was sent.
        case ended(playID: UInt64)
        /// The next play joined the current one (gapless, or a crossfade began): it is the
        /// session's play from here, streaming as the one before was.
        case joined(previous: UInt64, next: UInt64)
        case pause, resume, seek, stop
        /// The session sat idle (stopped, errored or paused) past the idle timeout.
        case idleTimeout
    }

    enum Action: Equatable {
        /// Start the play; `replacing` is the play to end with `finished`/`replaced`.
        case start(replacing: UInt64?)
        case emitReady
        /// End the play with `error` then `finished`/`error`.
        case fail
        /// The play reached its end: emit `finished`/`finished`.
        case finish
        case pause, resume, seek
        /// End the play with `finished`/`stopped`.
        case stop(playID: UInt64)
        /// Remove the session; `playID` is the play to end with `finished`/`cleanup`, if any.
        case remove(playID: UInt64?)
        /// Nothing to do (a stale input from an older play, or an idempotent stop).
        case none
        /// The input is not allowed in this state: 409 with this reason.
        case refuse(String)
    }

    private(set) var state: SessionState = .idle
    private(set) var playID: UInt64?

    /// Whether a play is in progress and owns resources.
    var hasActivePlay: Bool { state.isActive }

    mutating func handle(_ input: Input) -> Action {
        switch (input, state) {
        case (.play(let id), _):
            let replacing = hasActivePlay ? playID : nil
            state = .extracting
            playID = id
            return .start(replacing: replacing)

        case (.opened(let id), .extracting) where id == playID:
            state = .streaming
            return .emitReady
        case (.opened, _):
            return .none

        case (.failed(let id), .extracting), (.failed(let id), .streaming), (.failed(let id), .paused):
            guard id == playID else { return .none }
            state = .error
            return .fail
        case (.failed, _):
            return .none

        case (.ended(let id), .streaming) where id == playID:
            state = .stopped
            return .finish
        case (.ended, _):
            return .none

        case (.joined(let previous, let next), .streaming) where previous == playID:
            playID = next
            return .emitReady
        case (.joined, _):
            return .none

        case (.pause, .streaming):
            state = .paused
            return .pause
        case (.pause, .paused):
            return .refuse("the session is already paused")
        case (.pause, .extracting):
            return .refuse("the source is still being opened; pause once it plays")
        case (.pause, _):
            return .refuse("nothing is playing on this session")

        case (.resume, .paused):
            state = .streaming
            return .resume
        case (.resume, .streaming):
            return .refuse("the session is already playing; resume applies to a paused session")
        case (.resume, .extracting):
            return .refuse("the source is still being opened; it plays as soon as it is ready")
        case (.resume, _):
            return .refuse("nothing is paused on this session")

        case (.seek, .streaming), (.seek, .paused):
            return .seek
        case (.seek, .extracting):
            return .refuse("the source is still being opened; seek once it plays")
        case (.seek, _):
            return .refuse("nothing is playing on this session")

        case (.stop, .extracting), (.stop, .streaming), (.stop, .paused):
            state = .stopped
            return .stop(playID: playID!)
        case (.stop, _):
            return .none

        case (.idleTimeout, .stopped), (.idleTimeout, .error), (.idleTimeout, .idle):
            return .remove(playID: nil)
        case (.idleTimeout, .paused):
            state = .stopped
            return .remove(playID: playID)
        case (.idleTimeout, _):
            return .none
        }
    }
}
