// What every Router request carries: Hummingbird's context, the channel, the upgrade slot.
import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The request context: Hummingbird's WebSocket context plus the connection's channel, so a
/// client that stays behind can be disconnected even while a write to it is pending.
struct TonearmRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel
    private let upgrade: WebSocketUpgradeSlot

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
        upgrade = WebSocketUpgradeSlot()
    }

    var webSocket: WebSocketHandlerReference<Self> { upgrade.reference(releasedWhenClosing: channel) }
}
