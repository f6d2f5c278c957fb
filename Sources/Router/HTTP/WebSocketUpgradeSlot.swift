// Holds a WebSocket upgrade's handler box no longer than its connection.
import HummingbirdWebSocket
import NIOCore
import Synchronization

/// Where a request's WebSocket upgrade handler is kept, for as long as its connection is open.
///
/// Hummingbird keeps an upgrade's handler in a box that the request context holds, together with
/// a copy of that context: box → handler → context → box, a cycle nothing breaks. Held directly,
/// it kept every WebSocket connection's channel alive after the connection closed (4.4–5.4 KB
/// each, measured: the Router grew by 5 MB per thousand listeners that came and went). The slot
/// lets go of the box when the channel closes; by then Hummingbird has long taken the handler
/// out of it. Plain HTTP requests never ask for the box, so they never register the release.
final class WebSocketUpgradeSlot: Sendable {
    private let box = Mutex<WebSocketHandlerReference<TonearmRequestContext>?>(nil)

    func reference(releasedWhenClosing channel: any Channel) -> WebSocketHandlerReference<TonearmRequestContext> {
        let (reference, created) = box.withLock { box in
            if let reference = box { return (reference, false) }
            let reference = WebSocketHandlerReference<TonearmRequestContext>()
            box = reference
            return (reference, true)
        }
        // Outside the lock: on a channel already closed, NIO may run the release right here.
        if created { channel.closeFuture.whenComplete { [self] _ in box.withLock { $0 = nil } } }
        return reference
    }

    /// Whether a handler box is held (tests).
    var isHolding: Bool { box.withLock { $0 != nil } }
}
