// The engine's first step when told to stop (it is the last service, so the first stopped): in a
// cluster its Router is handing the sessions to other pairs, each at a moment a second or so
// ahead, and those plays must go on being heard until then. It waits while any play is in
// progress, up to TONEARM_HANDOVER_GRACE; then the control API, the pacer (`engine_stopping`
// for whatever still plays) and the socket stop as before. With no grace (a single pair) it
// returns at once.
import ServiceLifecycle

struct HandOverGrace: Service {
    let manager: SessionManager
    let grace: Duration

    func run() async {
        try? await gracefulShutdown()
        guard grace > .zero else { return }
        let deadline = ContinuousClock.now + grace
        while ContinuousClock.now < deadline, manager.playingCount > 0 {
            // Not cancelled before the group's own deadline; if it is, the engine stops at once.
            do { try await Task.sleep(for: .milliseconds(20)) } catch { return }
        }
    }
}
