// A network source read ahead of its demuxer: `HTTPSourceFetch` fills a bounded buffer (seconds
// of compressed audio) on an event loop, so a stalling server does not starve playback, and the
// demuxer reads it through a custom AVIO context. The AVIO side blocks while the bytes it needs
// have not arrived; it runs only on the source's own demux thread (`SourceDemuxThread`), never
// on a worker that other sessions wait for.
import CFFmpeg
import Foundation
import NIOCore

/// The read-ahead buffer and the custom AVIO context the demuxer reads through.
///
/// `@unchecked Sendable`: every mutable field is guarded by `condition`; the AVIO context is used
/// by the demux thread alone.
final class ReadAheadInput: SourceFetchSink, @unchecked Sendable {
    struct Configuration: Sendable {
        /// Bytes kept ahead of the demuxer. 384 KiB is about 10 s at 320 kbit/s, 24 s at 128 kbit/s.
        var capacity = 384 * 1024
        /// Failed reconnects in a row before the source is given up.
        var maxReconnects = 3
        /// HTTP headers to send (what yt-dlp asked for: User-Agent, Referer, …).
        var headers: [String: String] = [:]
        /// Called before each reconnect attempt.
        var onReconnect: @Sendable () -> Void = {}
    }

    /// How far ahead the buffer is.
    struct Stats: Sendable, Equatable {
        var buffered = 0
        /// The whole source has been fetched (or fetching failed for good).
        var finished = false
    }

    let url: String
    private let configuration: Configuration
    private let fetch: HTTPSourceFetch
    private let condition = NSCondition()
    // Guarded by `condition`:
    private var buffer: [UInt8] = []
    private var head = 0
    /// Absolute byte offset of `buffer[head]`.
    private var position: Int64 = 0
    private var size: Int64 = -1
    /// The first response has begun (or failed): `size` is known.
    private var started = false
    private var endOfStream = false
    private var failure: MediaError?
    private var closed = false
    /// The fetch's epoch this buffer accepts bytes from (bumped by a seek outside the buffer).
    private var epoch: UInt64 = 0
    /// The fetch stopped reading because the buffer was full.
    private var fetchPaused = false

    /// The context handed to libavformat as `pb`, once `open()` made it.
    private(set) var context: UnsafeMutablePointer<AVIOContext>?

    /// Starts fetching `url` at once; nothing here waits for the network.
    init(url: String, network: SourceNetwork, configuration: Configuration = .init()) {
        self.url = url
        self.configuration = configuration
        buffer.reserveCapacity(configuration.capacity)
        fetch = HTTPSourceFetch(
            url: url, headers: configuration.headers, network: network, maxReconnects: configuration.maxReconnects)
        fetch.start(at: 0, epoch: 0, into: self)
    }

    /// Waits for the response to begin, then makes the AVIO context. Blocks: call it on the
    /// source's own thread.
    func open() throws(MediaError) -> UnsafeMutablePointer<AVIOContext> {
        condition.lock()
        while !started && failure == nil && !closed { condition.wait() }
        let failed = failure, seekable = size > 0, cancelled = closed
        condition.unlock()
        if let failed { throw failed }
        if cancelled { throw MediaError(kind: .openFailed, message: "the play ended before its source opened") }
        let ioBufferSize: Int32 = 32 * 1024
        guard let ioBuffer = av_malloc(Int(ioBufferSize)) else { throw MediaError(kind: .openFailed, message: "out of memory") }
        let opaque = Unmanaged.passUnretained(self).toOpaque()
        guard
            let context = avio_alloc_context(
                ioBuffer.assumingMemoryBound(to: UInt8.self), ioBufferSize, 0, opaque,
                { opaque, buffer, size in
                    guard let opaque, let buffer else { return tonearm_averror_eio() }
                    return Unmanaged<ReadAheadInput>.fromOpaque(opaque).takeUnretainedValue().read(into: buffer, size: size)
                },
                nil,
                { opaque, offset, whence in
                    guard let opaque else { return Int64(tonearm_averror_eio()) }
                    return Unmanaged<ReadAheadInput>.fromOpaque(opaque).takeUnretainedValue().seek(offset, whence: whence)
                })
        else {
            av_free(ioBuffer)
            throw MediaError(kind: .openFailed, message: "out of memory")
        }
        context.pointee.seekable = seekable ? AVIO_SEEKABLE_NORMAL : 0
        self.context = context
        return context
    }

    /// Stops fetching and wakes a reader waiting for bytes (its read fails, with `failing` when
    /// given and nothing failed before). Any thread.
    func cancel(failing error: MediaError? = nil) {
        condition.lock()
        let first = !closed
        if first, failure == nil { failure = error }
        closed = true
        condition.broadcast()
        condition.unlock()
        if first { fetch.stop() }
    }

    /// Cancels, and frees the AVIO context. Call once, on the demux thread, after the demuxer
    /// that read through it is closed.
    func close() {
        cancel()
        if var context {
            av_freep(&context.pointee.buffer)
            var pointer: UnsafeMutablePointer<AVIOContext>? = context
            avio_context_free(&pointer)
            self.context = nil
        }
    }

    /// Why the source could not be read, once it could not.
    var failedWith: MediaError? {
        condition.lock()
        defer { condition.unlock() }
        return failure
    }

    var currentStats: Stats {
        condition.lock()
        defer { condition.unlock() }
        return Stats(buffered: buffer.count - head, finished: endOfStream || failure != nil)
    }

    // MARK: The fetch's side (its event loop)

    func fetchStarted(size: Int64?, at offset: Int64, epoch: UInt64) {
        condition.lock()
        defer { condition.unlock() }
        guard epoch == self.epoch, !closed else { return }
        if !started, let size { self.size = size }
        started = true
        condition.broadcast()
    }

    func fetchReceived(_ bytes: ByteBuffer, epoch: UInt64) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard epoch == self.epoch, !closed else { return true }
        if head > configuration.capacity / 2 {
            buffer.removeFirst(head)
            head = 0
        }
        buffer.append(contentsOf: bytes.readableBytesView)
        condition.broadcast()
        let room = buffer.count - head < configuration.capacity
        if !room { fetchPaused = true }
        return room
    }

    func fetchEnded(epoch: UInt64) {
        condition.lock()
        defer { condition.unlock() }
        guard epoch == self.epoch else { return }
        endOfStream = true
        condition.broadcast()
    }

    func fetchFailed(_ error: MediaError, epoch: UInt64) {
        condition.lock()
        defer { condition.unlock() }
        guard epoch == self.epoch else { return }
        failure = error
        condition.broadcast()
    }

    func fetchReconnecting(epoch: UInt64) {
        configuration.onReconnect()
    }

    // MARK: The demuxer's side (AVIO callbacks, on the demux thread)

    private func read(into destination: UnsafeMutablePointer<UInt8>, size requested: Int32) -> Int32 {
        condition.lock()
        while buffer.count - head == 0 && !endOfStream && failure == nil && !closed {
            condition.wait()
        }
        let available = buffer.count - head
        guard available > 0 else {
            condition.unlock()
            return failure != nil || closed ? tonearm_averror_eio() : tonearm_averror_eof()
        }
        let count = min(available, Int(max(requested, 0)))
        buffer.withUnsafeBufferPointer { source in
            guard let base = source.baseAddress else { return }
            destination.update(from: base + head, count: count)
        }
        head += count
        position += Int64(count)
        let resume = fetchPaused && buffer.count - head <= configuration.capacity / 2
        if resume { fetchPaused = false }
        condition.unlock()
        if resume { fetch.resume() }
        return Int32(count)
    }

    private func seek(_ offset: Int64, whence: Int32) -> Int64 {
        condition.lock()
        defer { condition.unlock() }
        if whence & AVSEEK_SIZE != 0 { return size }
        let target: Int64
        switch whence & ~AVSEEK_FORCE {
        case SEEK_SET: target = offset
        case SEEK_CUR: target = MediaTime.sum(position, offset)
        case SEEK_END:
            guard size > 0 else { return Int64(tonearm_averror_eio()) }
            target = MediaTime.sum(size, offset)
        default: return Int64(tonearm_averror_eio())
        }
        guard target >= 0 else { return Int64(tonearm_averror_eio()) }
        // Inside what is buffered (or already consumed and still held): move without the network.
        let bufferStart = position - Int64(head)
        let bufferEnd = position + Int64(buffer.count - head)
        if target >= bufferStart && target <= bufferEnd {
            head = Int(target - bufferStart)
            position = target
            return target
        }
        guard size > 0, !closed else { return Int64(tonearm_averror_eio()) }
        // Elsewhere: start over there. Bytes of the old request that are still on their way
        // carry the old epoch and are dropped.
        epoch += 1
        buffer.removeAll(keepingCapacity: true)
        head = 0
        position = target
        endOfStream = target >= size
        failure = nil
        fetchPaused = false
        if !endOfStream { fetch.start(at: target, epoch: epoch, into: self) }
        return target
    }
}
