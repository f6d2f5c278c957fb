// What the Router does after its engine link comes back: the engine may have restarted and lost
// plays the Router's listeners still think are in progress.
import Logging
import WireProtocol

enum EngineReconciliation {
    /// After a (re)connection: a play the Router thinks is in progress but the engine no longer
    /// has (it restarted) ends for its listeners, so nobody is left "playing" in silence.
    static func run(store: SessionStore, directory: SessionDirectory, engine: any EngineControl, logger: Logger) async {
        let believed = await directory.activePlays()
        guard !believed.isEmpty else { return }
        guard let actual = try? await engine.activePlays() else { return }
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
