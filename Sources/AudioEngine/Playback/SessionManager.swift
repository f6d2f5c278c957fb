// All sessions of the engine by id: starts and stops plays, and gives the pacer each tick's
// frames and events in the order the wire promises.
import Logging
import NIOCore
import NIOPosix
import Synchronization
import WireProtocol

/// How many frames a session keeps encoded ahead of the pacer, and the encoder settings.
struct PlaybackConfiguration: Sendable {
    /// Encoded lead in frames (20 ms each): volume, pause and seek take effect within it.
    var leadFrames = 5
    var encoder = OpusEncoderConfiguration()
}

/// What a play request answers with.
struct PlayStarted: Sendable, Equatable, Codable {
    var sessionID: SessionID
    var playID: UInt64
    var state: String

    enum CodingKeys: String, CodingKey {
        case sessionID = "session_id"
        case playID = "play_id"
        case state
    }
}

/// Owns every session's current play.
final class SessionManager: Sendable {
    private struct State {
        var playbacks: [SessionID: Playback] = [:]
        /// Events not tied to a playback's outbox (stop, replace), written first in the next tick.
        var pendingEvents: [WireEvent] = []
        var nextPlayID: UInt64 = 1
        var totals = FrameCounters()
    }

    private let state = Mutex(State())
    private let library: MediaLibrary
    private let configuration: PlaybackConfiguration
    private let workers: NIOThreadPool
    private let logger: Logger

    init(library: MediaLibrary, configuration: PlaybackConfiguration, workers: NIOThreadPool, logger: Logger) {
        self.library = library
        self.configuration = configuration
        self.workers = workers
        self.logger = logger
    }

    /// Starts playing `url` on `sessionID`, replacing whatever that session played.
    func play(sessionID: SessionID, url: String) throws(ControlError) -> PlayStarted {
        let source = try library.resolve(url)
        let playback = state.withLock { state in
            let playback = Playback(sessionID: sessionID, playID: state.nextPlayID, url: url, source: source)
            state.nextPlayID += 1
            if let old = state.playbacks.updateValue(playback, forKey: sessionID) {
                old.cancel()
                state.pendingEvents.append(Self.finished(old, .replaced))
            }
            return playback
        }
        logger.info(
            "play", metadata: ["session.id": "\(sessionID)", "play.id": "\(playback.playID)", "url": "\(url)"])
        schedule([playback])
        return PlayStarted(sessionID: sessionID, playID: playback.playID, state: "extracting")
    }

    /// Stops the session's play, if any. Returns whether something was playing.
    @discardableResult
    func stop(sessionID: SessionID) -> Bool {
        let stopped = state.withLock { state -> Playback? in
            guard let old = state.playbacks.removeValue(forKey: sessionID) else { return nil }
            old.cancel()
            state.pendingEvents.append(Self.finished(old, .stopped))
            return old
        }
        if let stopped {
            logger.info("stop", metadata: ["session.id": "\(sessionID)", "play.id": "\(stopped.playID)"])
        }
        return stopped != nil
    }

    /// Stops every session (graceful shutdown).
    func stopAll() {
        let ids = state.withLock { Array($0.playbacks.keys) }
        for id in ids { stop(sessionID: id) }
    }

    var sessionCount: Int { state.withLock { $0.playbacks.count } }
    var totals: FrameCounters { state.withLock { $0.totals } }

    /// Pacer side: appends this tick's events and one frame per streaming session to `batch`,
    /// and counts late ticks as deficit. Called from the pacer thread only.
    func collectTick(into batch: inout TickBatch, lateTicks: UInt64) {
        var refill: [Playback] = []
        let refillAt = max(configuration.leadFrames / 2, 1)
        state.withLock { state in
            for event in state.pendingEvents { batch.append(event) }
            state.pendingEvents.removeAll(keepingCapacity: true)
            var ended: [SessionID] = []
            for (id, playback) in state.playbacks {
                switch drain(playback, into: &batch, lateTicks: lateTicks, totals: &state.totals) {
                case .ended: ended.append(id)
                case .continuing: if playback.claimFill(refillAt: refillAt) { refill.append(playback) }
                }
            }
            for id in ended { state.playbacks.removeValue(forKey: id) }
        }
        schedule(refill, claimed: true)
    }

    private enum DrainResult { case continuing, ended }

    /// Moves the leading events and at most one frame of `playback` into the batch.
    private func drain(
        _ playback: Playback, into batch: inout TickBatch, lateTicks: UInt64, totals: inout FrameCounters
    ) -> DrainResult {
        var counted = FrameCounters()
        let result = playback.outbox.withLock { box -> DrainResult in
            if box.started { counted.deficit = lateTicks }
            while let head = box.items.first {
                switch head {
                case .event(let event):
                    box.items.removeFirst()
                    batch.append(event)
                case .frame(let packet):
                    box.items.removeFirst()
                    box.bufferedFrames -= 1
                    box.started = true
                    batch.append(packet, for: playback.sessionID)
                    counted.sent = 1
                    return .continuing
                case .end(let reason, let error):
                    box.items.removeFirst()
                    if let error {
                        batch.append(
                            WireEvent(
                                type: .error, sessionID: playback.sessionID, playID: playback.playID, code: error.code,
                                message: error.message))
                    }
                    batch.append(Self.finished(playback, reason))
                    return .ended
                }
            }
            if box.started { counted.nulled = 1 }
            return .continuing
        }
        playback.counters.withLock {
            $0.sent += counted.sent
            $0.nulled += counted.nulled
            $0.deficit += counted.deficit
        }
        totals.sent += counted.sent
        totals.nulled += counted.nulled
        totals.deficit += counted.deficit
        if result == .ended {
            logger.info(
                "play ended", metadata: ["session.id": "\(playback.sessionID)", "play.id": "\(playback.playID)"])
        }
        return result
    }

    /// Runs fill jobs on the worker pool (never on Swift's cooperative pool: they block in C).
    private func schedule(_ playbacks: [Playback], claimed: Bool = false) {
        for playback in playbacks {
            if !claimed && !playback.claimFill(refillAt: Int.max) { continue }
            let lead = configuration.leadFrames
            let encoder = configuration.encoder
            workers.submit { _ in playback.fill(lead: lead, encoder: encoder) }
        }
    }

    private static func finished(_ playback: Playback, _ reason: FinishReason) -> WireEvent {
        WireEvent(type: .finished, sessionID: playback.sessionID, playID: playback.playID, reason: reason)
    }
}
