// How a WebSocket client hears its session: a handler at the socket end of the client's pipeline
// that the session store writes to on the client's event loop. Each message is framed once for
// every client on a loop (server frames are unmasked, so the bytes are the same for all) and
// written with one write-and-flush per client. Profiled before: a writer task per client, woken
// per frame, cost about 24 µs of Router CPU per frame delivered.
import NIOCore
import NIOWebSocket

/// One WebSocket client's end of the fan-out. Sits on the socket side of the WebSocket frame
/// encoder, so its writes bypass the encoder but still pass every byte-level handler nearer the
/// socket (TLS); every other write passes through it. Loop-confined state: touched only on
/// `eventLoop`.
///
/// A client that reads slower than the session plays loses its own *oldest* frames, as every
/// subscriber does (`/listen` too): the channel holds only a few frames in flight (its write
/// watermarks, `ClientConnections.limitBuffering`); while it is full, frames wait here, at most
/// `queueFrames` of them, and a newer frame pushes the oldest waiting one out. A client that
/// catches up hears the present, not a backlog. Events are never dropped and keep their place.
final class WebSocketSink: ChannelDuplexHandler, ClientSink, @unchecked Sendable {
    typealias InboundIn = Any
    typealias OutboundIn = Any

    let eventLoop: any EventLoop
    /// Audio messages that may wait (frames, unless each message holds several).
    private let queueFrames: Int
    private var window: SlowClientWindow
    private let closeGrace: TimeAmount
    /// Told on the loop how many frames were dropped, at the end of each window that dropped
    /// some, and once with the reason when the client is disconnected for staying behind.
    private let report: @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    private var context: ChannelHandlerContext?
    /// Messages waiting for the channel to become writable, oldest first.
    private var waiting = CircularBuffer<(bytes: ByteBuffer, audio: Bool)>()
    private var waitingAudio = 0
    /// The client has been told to go (too slow, or the Router is stopping): nothing more is
    /// sent, and the connection is cut after the grace whatever the client does.
    private var leaving = false
    /// Told to move once what waits is written (`movedAfterWaiting`).
    private var moveWhenDrained = false

    /// Audio frames each audio message holds (`frames=N`, a `FrameBatchFeed`'s): the queue holds
    /// `queueFrames` frames' worth of messages, and a message lost counts as that many frames.
    private let framesPerMessage: Int

    init(
        eventLoop: any EventLoop, queueFrames: Int, window: SlowClientWindow, closeGrace: TimeAmount,
        framesPerMessage: Int = 1, report: @escaping @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    ) {
        self.eventLoop = eventLoop
        self.framesPerMessage = max(1, framesPerMessage)
        self.queueFrames = max(1, queueFrames / self.framesPerMessage)
        self.window = window
        self.closeGrace = closeGrace
        self.report = report
    }

    /// Adds `sink` to a WebSocket channel's pipeline just before its frame encoder. (Added first
    /// in the pipeline it would write around TLS: plain bytes on an encrypted connection.)
    static func install(_ sink: WebSocketSink, in channel: any Channel) async throws {
        try await channel.eventLoop.submit {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(sink, position: .before(try pipeline.handler(type: WebSocketFrameEncoder.self)))
        }.get()
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        waiting.removeAll()
        waitingAudio = 0
    }

    func encode(_ message: ClientMessage) -> ByteBuffer { WebSocketWire.frame(message) }

    /// Audio frames waiting for the client (tests read it).
    var waitingFrames: Int { waitingAudio }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        guard let context, !leaving else { return }
        if waiting.isEmpty && context.channel.isWritable {
            context.writeAndFlush(NIOAny(bytes), promise: nil)
        } else {
            waiting.append((bytes, audio))
            if audio { waitingAudio += 1 }
        }
        guard audio else { return }
        let lost = waitingAudio > queueFrames
        if lost { dropOldestAudio() }
        for _ in 0..<framesPerMessage {
            switch window.count(lost: lost) {
            case .counting: continue
            case .windowEnded(let dropped): if dropped > 0 { report(UInt64(dropped), nil) }
            case .tooSlow(let dropped, let reason):
                report(UInt64(dropped), reason)
                leave(context, code: 1008, reason: reason, grace: closeGrace)
                return
            }
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable && !leaving {
            var wrote = false
            while context.channel.isWritable, let next = waiting.popFirst() {
                if next.audio { waitingAudio -= 1 }
                context.write(NIOAny(next.bytes), promise: nil)
                wrote = true
            }
            if wrote { context.flush() }
            if moveWhenDrained && waiting.isEmpty { moved() }
        }
        context.fireChannelWritabilityChanged()
    }

    /// Removes the oldest waiting audio frame (events ahead of it keep their place).
    private func dropOldestAudio() {
        if waiting.first?.audio == true {
            waiting.removeFirst()
        } else if let index = waiting.firstIndex(where: { $0.audio }) {
            waiting.remove(at: index)
        }
        waitingAudio -= 1
    }

    /// The Router is stopping: the client is told so (1001) ahead of anything else waiting, and
    /// the connection is cut after `grace`, whether or not it answers (call on the loop).
    /// Close code 4012: the session moved to another pair; connect again (docs/cluster.md).
    func moved() {
        guard let context, !leaving else { return }
        leave(context, code: 4012, reason: "session_moved: this session now plays on another pair; connect again", grace: closeGrace)
    }

    /// Close code 4012 once every message already handed to this sink is written: what a relay
    /// leaving its owner asks for, so the frames before the cut all reach the relay (the owner
    /// keeps the ones after it for the client's next connection).
    func movedAfterWaiting() {
        guard context != nil, !leaving else { return }
        if waiting.isEmpty { moved() } else { moveWhenDrained = true }
    }

    func goAway(grace: TimeAmount) {
        guard let context, !leaving else { return }
        leave(context, code: 1001, reason: "the Router is shutting down", grace: grace)
    }

    /// Sends a close frame in place of whatever waits, then cuts the connection after `grace`.
    /// Frames the WebSocket library writes after that (its own close) are dropped here: its write
    /// would otherwise wait on a client that does not read, and hold the Router's shutdown.
    private func leave(_ context: ChannelHandlerContext, code: UInt16, reason: String, grace: TimeAmount) {
        leaving = true
        waiting.removeAll()
        waitingAudio = 0
        context.writeAndFlush(NIOAny(WebSocketWire.close(code: code, reason: reason)), promise: nil)
        let channel = context.channel
        eventLoop.scheduleTask(in: grace) { channel.close(promise: nil) }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !leaving else {
            promise?.succeed(())
            return
        }
        context.write(data, promise: promise)
    }
}
