// How the session store reaches a client: on its event loop, told when its session moves, and
// (a WebSocket connection, a `/listen` feed) written directly with bytes encoded once per loop.
import NIOCore

/// A client on an event loop that the store tells when its session moves.
package protocol MovableClient: AnyObject, Sendable {
    var eventLoop: any EventLoop { get }
    /// Tells the client its session moved to another pair of the cluster: it is to connect again
    /// (through any pair, which brings it to the new owner). Called on `eventLoop`.
    func moved()
}

/// A client written directly on its channel's event loop (a WebSocket connection, a session's
/// `/listen` feed).
package protocol ClientSink: MovableClient {
    /// The bytes `message` goes out as; computed once per message for all sinks of a loop.
    func encode(_ message: ClientMessage) -> ByteBuffer
    /// Called on `eventLoop`, in publish order. An audio frame may be dropped (the sink keeps
    /// its own slow-client window); events are not.
    func deliver(_ bytes: ByteBuffer, audio: Bool)
}

extension MovableClient {
    package func moved() {}
}
