// How a `/listen` listener hears its session: a handler among the connection's HTTP handlers that
// the session store writes to on the listener's event loop, as `WebSocketSink` is for WebSocket
// clients. It wraps each packet in the listener's own Ogg page and writes it as a body part of the
// response, and flushes every few packets rather than every one: a player buffers seconds, and a
// write to the socket is most of what a listener costs. Before it, each listener was a task woken
// by an `AsyncStream` for every packet, with a hop back to the event loop for every write: 1,000
// listeners of one session took about a whole core.
import NIOCore
import NIOHTTP1
import WireProtocol

/// One `/listen` listener's end of the fan-out. Sits on the socket side of the HTTP/1 codec's
/// typed-parts converter and the application side of the HTTP encoder, so its pages are framed
/// (chunked) by the encoder and encrypted by TLS like any body. Starts writing once the response's
/// head (200) has passed it; goes quiet for good once the response's end has. Loop-confined
/// state: touched only on `eventLoop`.
///
/// A listener that reads slower than the session plays loses its own *oldest* packets, as every
/// subscriber does: the channel holds only a few KB in flight (`ClientConnections.limitBuffering`);
/// while it is full, packets wait here, at most `queueFrames` of them, and a newer packet pushes
/// the oldest waiting one out. One that loses too many within a window is disconnected.
final class ListenSink: ChannelDuplexHandler, ClientSink, @unchecked Sendable {
    typealias InboundIn = Any
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    /// What waits for the channel: a packet, or a track's start (its title).
    private enum Item {
        case packet(ByteBuffer)
        case track(title: String?, artist: String?)
    }

    let eventLoop: any EventLoop
    private let queueFrames: Int
    private let flushEvery: Int
    /// Whether each new track begins a chained stream with its title (`chain=0`: one stream).
    private let chains: Bool
    private var window: SlowClientWindow
    private let closeGrace: TimeAmount
    private let report: @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    /// Called once the stream is over on this side (the listener cut, the session moved, the
    /// Router stopping), so the response can end.
    private let ended: @Sendable () -> Void
    private var context: ChannelHandlerContext?
    private var ogg = OggOpusWriter()
    /// The title the stream's first headers carry, until they are written.
    private var title: String?, artist: String?
    private var begun = false
    /// The response's head has gone out (and its end not yet): pages may follow.
    private var started = false
    /// The response has ended, or the listener was told to go: nothing more is written.
    private var finished = false
    private var waiting = CircularBuffer<Item>()
    private var waitingPackets = 0
    private var unflushed = 0

    init(
        eventLoop: any EventLoop, queueFrames: Int, window: SlowClientWindow, closeGrace: TimeAmount, chains: Bool,
        title: String?, artist: String?, flushEvery: Int = 5, ended: @escaping @Sendable () -> Void = {},
        report: @escaping @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    ) {
        self.eventLoop = eventLoop
        self.queueFrames = max(1, queueFrames)
        self.window = window
        self.closeGrace = closeGrace
        self.chains = chains
        self.title = title
        self.artist = artist
        self.flushEvery = max(1, flushEvery)
        self.report = report
        self.ended = ended
    }

    /// Adds `sink` to an HTTP/1 channel's pipeline just after its response encoder.
    static func install(_ sink: ListenSink, in channel: any Channel) async throws {
        try await channel.eventLoop.submit {
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(sink, position: .after(try pipeline.handler(type: HTTPResponseEncoder.self)))
        }.get()
    }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        retire()
    }

    /// The packet itself (each listener's page differs), or the event's line.
    func encode(_ message: ClientMessage) -> ByteBuffer {
        switch message {
        case .audio(let packet): packet
        case .event(let line): ByteBuffer(string: line)
        }
    }

    /// Packets waiting for the listener (tests read it).
    var waitingFrames: Int { waitingPackets }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        guard !finished else { return }
        guard audio else {
            // `ready` comes just before its play's first packet (docs/wire-protocol.md); other
            // events say the session paused or stopped: what was written goes out now.
            if let ready = ClientConnections.trackStart(String(buffer: bytes)) {
                send(.track(title: ready.title, artist: ready.artist))
            } else if let context, unflushed > 0 {
                flush(context)
            }
            return
        }
        send(.packet(bytes))
        let lost = waitingPackets > queueFrames
        if lost { dropOldestPacket() }
        switch window.count(lost: lost) {
        case .counting: break
        case .windowEnded(let dropped): if dropped > 0 { report(UInt64(dropped), nil) }
        case .tooSlow(let dropped, let reason):
            report(UInt64(dropped), reason)
            leave(grace: closeGrace)
        }
    }

    private func send(_ item: Item) {
        if case .packet = item { waitingPackets += 1 }
        waiting.append(item)
        drain()
    }

    /// Writes what waits while the channel takes it; flushes every `flushEvery` packets, and
    /// whenever the channel fills (its watermark counts unflushed bytes too).
    private func drain() {
        guard let context, started, !finished else { return }
        while context.channel.isWritable, let item = waiting.popFirst() {
            switch item {
            case .packet(let packet):
                waitingPackets -= 1
                if !begun {
                    context.write(wrapOutboundOut(.body(.byteBuffer(ogg.headers(title: title, artist: artist)))), promise: nil)
                    begun = true
                }
                context.write(wrapOutboundOut(.body(.byteBuffer(ogg.page(for: packet)))), promise: nil)
                unflushed += 1
                if unflushed >= flushEvery || !context.channel.isWritable { flush(context) }
            case .track(let title, let artist):
                if !begun {
                    (self.title, self.artist) = (title, artist)
                } else if chains {
                    context.write(wrapOutboundOut(.body(.byteBuffer(ogg.chain(title: title, artist: artist)))), promise: nil)
                }
            }
        }
    }

    private func flush(_ context: ChannelHandlerContext) {
        unflushed = 0
        context.flush()
    }

    /// A flush from the response's writer (its head, say) takes the pages written so far too.
    func flush(context: ChannelHandlerContext) { flush(context) }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        drain()
        // A listener catching up gets what waited at once.
        if unflushed > 0 { flush(context) }
        context.fireChannelWritabilityChanged()
    }

    /// Removes the oldest waiting packet (a track's start ahead of it keeps its place).
    private func dropOldestPacket() {
        if let index = waiting.firstIndex(where: { if case .packet = $0 { true } else { false } }) {
            waiting.remove(at: index)
            waitingPackets -= 1
        }
    }

    /// Nothing more is written, for good (the stream could not begin; call on the loop).
    func retire() {
        finished = true
        waiting.removeAll()
        waitingPackets = 0
    }

    /// The Router is stopping, or the listener stays behind: what was written goes out, the
    /// response ends, and the connection is cut after `grace` (call on the loop).
    func leave(grace: TimeAmount) {
        guard !finished else { return }
        moved()
        guard let context else { return }
        let channel = context.channel
        eventLoop.scheduleTask(in: grace) { channel.close(promise: nil) }
    }

    /// The session moved to another pair of the cluster: what was written goes out and the
    /// response ends (a player connects again, through any pair; call on the loop).
    func moved() {
        guard !finished else { return }
        retire()
        if let context { flush(context) }
        ended()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        context.write(data, promise: promise)
        switch part {
        case .head(let head) where !started && !finished:
            // Only the stream's own answer: a refusal written instead gets no pages.
            guard head.status == .ok else { return }
            started = true
            drain()
        case .end:
            started = false
            retire()
        default:
            break
        }
    }
}
