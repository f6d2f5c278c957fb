// What the Router does after its engine link comes back: the engine may have restarted and lost
// plays the Router's listeners still think are in progress.
import EngineAPI
import Logging
import WireProtocol

enum EngineReconciliation {
    /// After a (re)connection: a play the Router thinks is in progress but the engine no longer
    /// has (it restarted) ends for its listeners, so nobody is left "playing" in silence.
    ///
    /// In a cluster (`owns` given), a play of a session this pair does not own is stopped: its
    /// Router was away long enough for another pair to take the session, which plays it now.
    static func run(
        store: SessionStore, directory: SessionDirectory, engine: any EngineControl, logger: Logger,
        owns: (@Sendable (SessionID) -> Bool)? = nil
    ) async {
        let believed = await directory.activePlays()
        guard !believed.isEmpty || owns != nil else { return }
        guard let actual = try? await engine.activePlays() else { return }
        if let owns {
            for id in actual.keys where believed[id] == nil && !owns(id) {
                logger.notice("stopping a play of a session another pair owns", metadata: ["session.id": "\(id)"])
                try? await engine.control(id, .stop)
            }
        }
        for (id, playID) in believed where actual[id] != playID {
            logger.warning("play lost with the engine", metadata: ["session.id": "\(id)", "play.id": "\(playID)"])
            store.route(
                .event(
                    WireEvent(
                        type: .finished, sessionID: id, playID: playID, reason: .stopped, code: "engine_restarted",
                        message: "the audio engine restarted; press play to continue")))
        }
    }
}
