// What this Router relays to other pairs: the clients, grouped by the upstream they share
// (RelayUpstreams), and those upstreams as the hand-over sees them (RelayedClients): when the
// Router stops, each is moved (`ClusterRelay.follow`: 4012 to its clients after the last frame
// it was sent, the owner keeping the rest for their next connections) before the HTTP server's
// own shutdown would close them with a bare 1000.
import Hummingbird
import NIOWebSocket
import Synchronization

/// The upstreams relaying now, each told to leave when the Router stops.
final class RelayedClients: Sendable {
    private struct State {
        var next: UInt64 = 0
        var leaves: [UInt64: AsyncStream<Void>.Continuation] = [:]
        var leaving = false
    }
    private let state = Mutex(State())

    /// An upstream starts: its `leave` signal, and the key it ends with.
    func add() -> (key: UInt64, leave: AsyncStream<Void>) {
        let (stream, continuation) = AsyncStream<Void>.makeStream()
        let key = state.withLock { state -> UInt64 in
            state.next += 1
            state.leaves[state.next] = continuation
            return state.next
        }
        // An upstream that starts while the Router stops leaves at once.
        if state.withLock({ $0.leaving }) { continuation.yield() }
        return (key, stream)
    }

    func remove(_ key: UInt64) {
        state.withLock { $0.leaves.removeValue(forKey: key) }?.finish()
    }

    var count: Int { state.withLock { $0.leaves.count } }

    /// Moves every relayed client, and waits until each upstream has told its clients (at most `patience`).
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

/// This Router's shared upstreams, one per session, path and frames per message.
final class RelayUpstreams: Sendable {
    private struct State {
        var groups: [SharedUpstream.Key: SharedUpstream] = [:]
        var nextMember: UInt64 = 0
    }
    private let state = Mutex(State())

    /// A client joins the upstream of `key`, made (and started by `start`) when there is none.
    func join(_ key: SharedUpstream.Key, request: Request, start: (SharedUpstream) -> Void)
        -> (group: SharedUpstream, member: RelayMember, output: AsyncStream<RelayOutput>)
    {
        let (group, member, output, made) = state.withLock { state in
            state.nextMember += 1
            let (member, output) = RelayMember.make(number: state.nextMember, request: request)
            let existing = state.groups[key]
            let group = existing ?? SharedUpstream(key: key)
            state.groups[key] = group
            group.add(member)
            return (group, member, output, existing == nil)
        }
        if made { start(group) }
        return (group, member, output)
    }

    /// A client left; an upstream without clients is let go (its run ends at its next look).
    func leave(_ member: RelayMember, of group: SharedUpstream) {
        let last = state.withLock { state in
            guard group.remove(member) == 0 else { return false }
            if state.groups[group.key] === group { state.groups[group.key] = nil }
            return true
        }
        if last { group.closeUpstream() }
    }

    /// The upstream has ended: no client joins it any more, and each is closed.
    func retire(_ group: SharedUpstream, _ code: WebSocketErrorCode, _ reason: String) {
        state.withLock { state in
            if state.groups[group.key] === group { state.groups[group.key] = nil }
        }
        group.closeAll(code, reason)
    }

    var upstreamCount: Int { state.withLock { $0.groups.count } }
    var clientCount: Int { state.withLock { $0.groups.values.reduce(0) { $0 + $1.memberCount } } }
}
