// Several frames per WebSocket message, for clients that ask for it (`/bot?…&frames=3`): a bot
// with a jitter buffer loses nothing when 2–10 frames come at once, and each message costs the
// Router one write and the kernel one send, whatever it holds. The message is built once per
// session for all its clients that take that many (docs/bot-protocol.md).
import NIOCore

/// The session's audio in messages of `framesPerMessage` frames, each frame as `[u16 BE length]
/// [Opus packet]`, written to its WebSocket clients; an event sends what was gathered first,
/// then itself. Confined to `eventLoop`.
final class FrameBatchFeed: SessionFeed, @unchecked Sendable {
    let eventLoop: any EventLoop
    let framesPerMessage: Int
    var variant: Int { framesPerMessage }
    /// The most a client may ask for: 10 frames, 200 ms.
    static let maxFrames = 10
    private var pending = ByteBuffer()
    private var pendingFrames = 0
    private var clients = FeedClients<WebSocketSink>()

    init(eventLoop: any EventLoop, framesPerMessage: Int) {
        self.eventLoop = eventLoop
        self.framesPerMessage = min(max(1, framesPerMessage), Self.maxFrames)
    }

    /// Clients written to (tests read it).
    var clientCount: Int { clients.count }

    func add(_ client: WebSocketSink) { clients.add(client) }

    func remove(_ client: WebSocketSink) { clients.remove(client) }

    /// The packet itself (gathered in `deliver`), or the event's text frame.
    func encode(_ message: ClientMessage) -> ByteBuffer {
        switch message {
        case .audio(let packet): packet
        case .event: WebSocketWire.frame(message)
        }
    }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        guard audio else {
            emitPending()
            clients.forEach(on: eventLoop) { $0.deliver(bytes, audio: false) }
            return
        }
        // A packet is at most 65,511 bytes (WireFormat.maxFrameLength less the session id).
        guard let length = UInt16(exactly: bytes.readableBytes) else { return }
        pending.writeInteger(length)
        pending.writeImmutableBuffer(bytes)
        pendingFrames += 1
        if pendingFrames >= framesPerMessage { emitPending() }
    }

    private func emitPending() {
        guard pendingFrames > 0 else { return }
        let message = WebSocketWire.frame(opcode: 0x2, payload: pending.readableBytesView, allocator: ByteBufferAllocator())
        pending.clear()
        pendingFrames = 0
        clients.forEach(on: eventLoop) { $0.deliver(message, audio: true) }
    }
}

/// The Router's frame-batch feeds, one per session and number of frames while it has clients.
typealias FrameBatchFeeds = SessionFeeds<FrameBatchFeed>
