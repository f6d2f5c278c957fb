// How a `/listen` listener hears its session: a handler among the connection's HTTP handlers that
// its session's `ListenFeed` hands runs of Ogg pages to, on the listener's event loop. The first
// run it writes is preceded by the stream's headers (its own two pages); every run is one body
// part and one flush (100 ms of audio). A listener who joined mid-stream gets renumbered copies
// until the next track's chain; from there on, the run's own bytes. Before
// the feed, each listener built its own pages and wrote each one: 1,000 listeners of one session
// took a quarter of a core; before this sink, a task woken for every packet took a whole one.
import NIOCore
import NIOHTTP1

/// One `/listen` listener's end of the fan-out. Sits on the socket side of the HTTP/1 codec's
/// typed-parts converter and the application side of the HTTP encoder, so its pages are framed
/// (chunked) by the encoder and encrypted by TLS like any body. Starts writing once the response's
/// head (200) has passed it; goes quiet for good once the response's end has. Loop-confined
/// state: touched only on `eventLoop`.
///
/// A listener that reads slower than the session plays loses its own *oldest* audio, as every
/// subscriber does: the channel holds only a few KB in flight (`ClientConnections.limitBuffering`);
/// while it is full, runs wait here, at most `queueFrames` packets of them, and a newer run pushes
/// the oldest waiting audio run out (a chain, which begins a stream, is never lost). One that
/// loses too many within a window is disconnected.
final class ListenSink: ChannelDuplexHandler, MovableClient, @unchecked Sendable {
    typealias InboundIn = Any
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    let eventLoop: any EventLoop
    private let queueFrames: Int
    private var window: SlowClientWindow
    private let closeGrace: TimeAmount
    private let report: @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    /// Called once the stream is over on this side (the listener cut, the session moved, the
    /// Router stopping), so the response can end.
    private let ended: @Sendable () -> Void
    private var context: ChannelHandlerContext?
    /// The stream's headers have been written: runs follow.
    private var begun = false
    /// How much lower this listener's page numbers are than the feed's: its headers are pages 0
    /// and 1 (libogg takes a first page numbered otherwise for a hole), so until the next chain
    /// begins a stream at 0 for everyone, its pages are renumbered copies.
    private var renumber: UInt32 = 0
    /// The response's head has gone out (and its end not yet): pages may follow.
    private var started = false
    /// The response has ended, or the listener was told to go: nothing more is written.
    private var finished = false
    private var waiting = CircularBuffer<OggRun>()
    private var waitingPackets = 0

    init(
        eventLoop: any EventLoop, queueFrames: Int, window: SlowClientWindow, closeGrace: TimeAmount,
        ended: @escaping @Sendable () -> Void = {},
        report: @escaping @Sendable (_ dropped: UInt64, _ disconnectReason: String?) -> Void
    ) {
        self.eventLoop = eventLoop
        self.queueFrames = max(1, queueFrames)
        self.window = window
        self.closeGrace = closeGrace
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

    /// Packets waiting for the listener (tests read it).
    var waitingFrames: Int { waitingPackets }

    /// A run of the session's stream, from its feed (call on `eventLoop`).
    func take(_ run: OggRun) {
        guard !finished else { return }
        waiting.append(run)
        waitingPackets += run.packets
        drain()
        guard run.kind == .audio else { return }
        var lost = 0
        while waitingPackets > queueFrames, let index = waiting.firstIndex(where: { $0.kind == .audio }) {
            lost += waiting[index].packets
            waitingPackets -= waiting[index].packets
            waiting.remove(at: index)
        }
        for frame in 0..<max(run.packets, lost) {
            switch window.count(lost: frame < lost) {
            case .counting: break
            case .windowEnded(let dropped): if dropped > 0 { report(UInt64(dropped), nil) }
            case .tooSlow(let dropped, let reason):
                report(UInt64(dropped), reason)
                leave(grace: closeGrace)
                return
            }
        }
    }

    /// Writes what waits while the channel takes it, then flushes.
    private func drain() {
        guard let context, started, !finished else { return }
        var wrote = false
        while context.channel.isWritable, let run = waiting.popFirst() {
            waitingPackets -= run.packets
            switch run.kind {
            case .chain:
                // A stream this listener never began has nothing to end; its headers come with
                // the first audio run.
                guard begun else { continue }
                context.write(wrapOutboundOut(.body(.byteBuffer(run.pages(renumberedBy: renumber)))), promise: nil)
                renumber = 0
            case .audio:
                if !begun {
                    let headers = OggOpusWriter.headers(serial: run.serial, sequence: 0, title: run.title, artist: run.artist)
                    context.write(wrapOutboundOut(.body(.byteBuffer(headers))), promise: nil)
                    renumber = run.firstSequence &- 2
                    begun = true
                }
                context.write(wrapOutboundOut(.body(.byteBuffer(run.pages(renumberedBy: renumber)))), promise: nil)
            }
            wrote = true
        }
        if wrote { context.flush() }
    }

    /// A flush from the response's writer (its head, say) takes the pages written so far too.
    func flush(context: ChannelHandlerContext) { context.flush() }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        // A listener catching up gets what waited at once.
        drain()
        context.fireChannelWritabilityChanged()
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
        if let context { context.flush() }
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
