// How a WebSocket client hears its session: a handler at the socket end of the client's pipeline
// that the session store writes to on the client's event loop. Each message is framed once for
// every client on a loop (server frames are unmasked, so the bytes are the same for all) and
// written with one write-and-flush per client. Profiled before: a writer task per client, woken
// per frame, cost about 24 µs of Router CPU per frame delivered.
import NIOCore
import NIOWebSocket

/// The WebSocket frame bytes of a message (RFC 6455 §5.2, server to client: no mask).
package enum WebSocketWire {
    package static func frame(_ message: ClientMessage, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        switch message {
        case .audio(let payload):
            return frame(opcode: 0x2, payload: payload.readableBytesView, allocator: allocator)
        case .event(let text):
            return frame(opcode: 0x1, payload: text.utf8, allocator: allocator)
        }
    }

    /// A close frame with `code` and `reason` (the reason cut to fit a control frame's 125 bytes).
    static func close(code: UInt16, reason: String) -> ByteBuffer {
        var payload = ByteBuffer()
        payload.writeInteger(code)
        payload.writeBytes(reason.utf8.prefix(123))
        return frame(opcode: 0x8, payload: payload.readableBytesView, allocator: ByteBufferAllocator())
    }

    static func frame(opcode: UInt8, payload: some Collection<UInt8>, allocator: ByteBufferAllocator) -> ByteBuffer {
        let count = payload.count
        var buffer = allocator.buffer(capacity: count + 10)
        buffer.writeInteger(0x80 | opcode)
        if count < 126 {
            buffer.writeInteger(UInt8(count))
        } else if count <= Int(UInt16.max) {
            buffer.writeInteger(UInt8(126))
            buffer.writeInteger(UInt16(count))
        } else {
            buffer.writeInteger(UInt8(127))
            buffer.writeInteger(UInt64(count))
        }
        buffer.writeBytes(payload)
        return buffer
    }
}

/// One WebSocket client's end of the fan-out. Sits on the socket side of the WebSocket frame
/// encoder, so its writes bypass the encoder but still pass every byte-level handler nearer the
/// socket (TLS); every other write passes through it. Loop-confined state: touched only on
/// `eventLoop`.
final class WebSocketFanOut: ChannelOutboundHandler, ClientSink, @unchecked Sendable {
    typealias OutboundIn = Any

    let eventLoop: any EventLoop
    private let window: Int
    private let dropLimit: Int
    private let closeGrace: TimeAmount
    /// Told on the loop how many frames were dropped, at the end of each window that dropped
    /// some, and once with the reason when the client is disconnected for staying behind.
    private let report: @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    private var context: ChannelHandlerContext?
    private var framesInWindow = 0
    private var droppedInWindow = 0
    private var droppedSinceReport: UInt64 = 0
    private var slow = false

    init(
        eventLoop: any EventLoop, window: Int, dropLimit: Int, closeGrace: TimeAmount,
        report: @escaping @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    ) {
        self.eventLoop = eventLoop
        self.window = window
        self.dropLimit = dropLimit
        self.closeGrace = closeGrace
        self.report = report
    }

    /// Adds `sink` to a WebSocket channel's pipeline just before its frame encoder. (Added first
    /// in the pipeline it would write around TLS: plain bytes on an encrypted connection.)
    static func install(_ sink: WebSocketFanOut, in channel: any Channel) async throws {
        try await channel.eventLoop.submit {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(sink, position: .before(try pipeline.handler(type: WebSocketFrameEncoder.self)))
        }.get()
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func encode(_ message: ClientMessage) -> ByteBuffer { WebSocketWire.frame(message) }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        guard let context, !slow else { return }
        guard audio else {
            context.writeAndFlush(NIOAny(bytes), promise: nil)
            return
        }
        // The channel's write-buffer watermarks are the client's buffer: beyond them, frames drop.
        let lost = !context.channel.isWritable
        if !lost { context.writeAndFlush(NIOAny(bytes), promise: nil) }
        framesInWindow += 1
        if lost {
            droppedInWindow += 1
            droppedSinceReport += 1
        }
        if droppedInWindow > dropLimit {
            slow = true
            let reason = "too slow: lost \(droppedInWindow) of the last \(framesInWindow) audio frames"
            report(droppedSinceReport, reason)
            // Say why, then cut the connection if the close frame cannot get out either.
            context.writeAndFlush(NIOAny(WebSocketWire.close(code: 1008, reason: reason)), promise: nil)
            let channel = context.channel
            eventLoop.scheduleTask(in: closeGrace) { channel.close(promise: nil) }
        } else if framesInWindow >= window {
            if droppedSinceReport > 0 { report(droppedSinceReport, nil) }
            framesInWindow = 0
            droppedInWindow = 0
            droppedSinceReport = 0
        }
    }
}
