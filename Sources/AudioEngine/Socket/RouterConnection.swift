// One Router connection on the engine's socket, with its own bounded queue of ticks. The pacer
// hands every tick to every connection without waiting; a connection whose socket is full keeps
// at most `maxQueuedTicks` ticks and drops the audio of its oldest ones (events are kept, in
// order), so a slow Router hears the newest audio when it catches up and never delays anyone.
import NIOCore
import Synchronization

/// The per-connection queue between the pacer and one Router socket.
final class RouterConnection: Sendable {
    /// Ticks (20 ms each) a connection may have waiting before its oldest lose their audio.
    static let maxQueuedTicks = 10
    /// Ticks (10 s) after which a connection that reads nothing is closed.
    static let maxStalledTicks = 500

    private struct Queue {
        var ticks = CircularBuffer<TickBatch>(initialCapacity: Self.capacity)
        /// A drain is scheduled on the event loop.
        var draining = false
        static let capacity = 16
    }

    let channel: any Channel
    private let queue = Mutex(Queue())

    init(channel: any Channel) { self.channel = channel }

    /// Queues one tick; returns how many audio frames had to be dropped to stay within bounds.
    /// Called from the pacer thread; never blocks on the socket.
    func enqueue(_ batch: TickBatch) -> Int {
        var dropped = 0
        var close = false
        let scheduleDrain = queue.withLock { queue -> Bool in
            queue.ticks.append(batch)
            if queue.ticks.count > Self.maxQueuedTicks,
                let oldest = queue.ticks.firstIndex(where: { $0.frames > 0 })
            {
                // Keep the oldest tick's events (they order the stream) but not its audio.
                dropped = queue.ticks[oldest].frames
                queue.ticks[oldest] = queue.ticks[oldest].withoutAudio()
            }
            if queue.ticks.count > Self.maxStalledTicks {
                // Nothing read for seconds: the Router is gone or hung; it reconnects.
                queue.ticks.removeAll()
                close = true
                return false
            }
            guard !queue.draining else { return false }
            queue.draining = true
            return true
        }
        if scheduleDrain {
            channel.eventLoop.execute { self.drain() }
        }
        if close { channel.close(promise: nil) }
        return dropped
    }

    /// Writes queued ticks while the socket takes them. Runs on the channel's event loop; runs
    /// again from `WritabilityHandler` when a full socket drains. While the socket is full the
    /// `draining` flag stays set, so the pacer only queues.
    func drain() {
        var wrote = false
        while channel.isWritable {
            let next = queue.withLock { queue -> TickBatch? in
                guard let tick = queue.ticks.popFirst() else {
                    queue.draining = false
                    return nil
                }
                return tick
            }
            guard let next else { break }
            channel.write(next.all, promise: nil)
            wrote = true
        }
        if wrote { channel.flush() }
    }
}

/// Calls `drain()` when the socket can take more.
final class WritabilityHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    let connection: RouterConnection

    init(connection: RouterConnection) { self.connection = connection }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { connection.drain() }
        context.fireChannelWritabilityChanged()
    }
}
