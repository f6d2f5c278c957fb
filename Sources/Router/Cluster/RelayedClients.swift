// The clients this Router relays to other pairs, as the hand-over sees them: when the Router
// stops, each is moved (`ClusterRelay.leave`: 4012 after the last frame it was relayed, the owner
// keeping the rest for its next connection) before the HTTP server's own shutdown would close it
// with a bare 1000.
import Synchronization

final class RelayedClients: Sendable {
    private struct State {
        var next: UInt64 = 0
        var leaves: [UInt64: AsyncStream<Void>.Continuation] = [:]
        var leaving = false
    }
    private let state = Mutex(State())

    /// A relay starts: its `leave` signal, and the key it ends with.
    func add() -> (key: UInt64, leave: AsyncStream<Void>) {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let key = state.withLock { state -> UInt64 in
            state.next += 1
            state.leaves[state.next] = continuation
            return state.next
        }
        // A relay that starts while the Router stops leaves at once.
        if state.withLock({ $0.leaving }) { continuation.yield() }
        return (key, stream)
    }

    func remove(_ key: UInt64) {
        state.withLock { $0.leaves.removeValue(forKey: key) }?.finish()
    }

    var count: Int { state.withLock { $0.leaves.count } }

    /// Moves every relayed client, and waits until each has been told (at most `patience`).
    func leaveAll(patience: Duration) async {
        let leaves = state.withLock { state in
            state.leaving = true
            return Array(state.leaves.values)
        }
        for leave in leaves { leave.yield() }
        let deadline = ContinuousClock.now + patience
        while count > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }
}
