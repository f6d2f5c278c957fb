// A network source read ahead of the demuxer: a thread of its own pulls bytes from libavformat's
// http(s) client into a bounded buffer (seconds of compressed audio), so a stalling server does
// not starve playback; when the connection drops, it reopens at the byte where it stopped
// (an HTTP range request) and carries on, up to `maxReconnects` failed attempts in a row.
import CFFmpeg
import Foundation

/// The read-ahead buffer and the custom AVIO context the demuxer reads through.
///
/// `@unchecked Sendable`: every mutable field is guarded by `condition`; the AVIO contexts are
/// used by one thread each (the network one by the reader thread, the custom one by the demuxer).
public final class ReadAheadInput: @unchecked Sendable {
    public struct Configuration: Sendable {
        /// Bytes kept ahead of the demuxer. 384 KiB is about 10 s at 320 kbit/s, 24 s at 128 kbit/s.
        public var capacity = 384 * 1024
        /// Failed reconnects in a row before the source is given up.
        public var maxReconnects = 3
        /// FFmpeg protocol options (headers, user agent, timeouts).
        public var options: [String: String] = [:]
        /// Called on the reader thread before each reconnect attempt.
        public var onReconnect: @Sendable () -> Void = {}
        public init() {}
    }

    /// How far ahead the buffer is.
    public struct Stats: Sendable, Equatable {
        public var buffered = 0
        /// The whole source has been fetched (or fetching failed for good).
        public var finished = false
    }

    private let url: String
    private let configuration: Configuration
    private let condition = NSCondition()
    // Guarded by `condition`:
    private var buffer: [UInt8] = []
    private var head = 0
    /// Absolute byte offset of `buffer[head]`.
    private var position: Int64 = 0
    /// Absolute offset the reader continues from.
    private var fetchOffset: Int64 = 0
    private var size: Int64 = -1
    private var endOfStream = false
    private var failure: Int32?
    private var closed = false
    private var seekTarget: Int64?
    private var readerDone = false

    /// The context handed to libavformat as `pb`.
    public private(set) var context: UnsafeMutablePointer<AVIOContext>?

    /// Opens `url` (blocking until the first connection succeeds or fails) and starts reading ahead.
    public init(url: String, configuration: Configuration = .init()) throws(MediaError) {
        self.url = url
        self.configuration = configuration
        buffer.reserveCapacity(configuration.capacity)
        let network: UnsafeMutablePointer<AVIOContext>
        do {
            network = try open(at: 0)
        } catch {
            throw MediaError(kind: .openFailed, message: "cannot open the source: \(ffmpegErrorText(error.code))")
        }
        size = avio_size(network)
        let ioBufferSize: Int32 = 32 * 1024
        guard let ioBuffer = av_malloc(Int(ioBufferSize)) else {
            var n: UnsafeMutablePointer<AVIOContext>? = network
            avio_closep(&n)
            throw MediaError(kind: .openFailed, message: "out of memory")
        }
        let opaque = Unmanaged.passUnretained(self).toOpaque()
        context = avio_alloc_context(
            ioBuffer.assumingMemoryBound(to: UInt8.self), ioBufferSize, 0, opaque,
            { opaque, buffer, size in
                Unmanaged<ReadAheadInput>.fromOpaque(opaque!).takeUnretainedValue().read(into: buffer!, size: size)
            },
            nil,
            { opaque, offset, whence in
                Unmanaged<ReadAheadInput>.fromOpaque(opaque!).takeUnretainedValue().seek(offset, whence: whence)
            })
        context?.pointee.seekable = size > 0 ? AVIO_SEEKABLE_NORMAL : 0
        let handle = NetworkHandle(context: network)
        let reader = Thread { [self] in run(network: handle.context) }
        reader.name = "tonearm-readahead"
        reader.start()
    }

    /// Stops the reader thread and frees the contexts. Call once the demuxer is done with it.
    public func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        while !readerDone { condition.wait() }
        condition.unlock()
        if var context {
            av_freep(&context.pointee.buffer)
            var pointer: UnsafeMutablePointer<AVIOContext>? = context
            avio_context_free(&pointer)
            self.context = nil
        }
    }

    public var currentStats: Stats {
        condition.lock()
        defer { condition.unlock() }
        return Stats(buffered: buffer.count - head, finished: endOfStream || failure != nil)
    }

    // MARK: Reader thread

    /// `@unchecked Sendable`: the network context is handed to the reader thread, which alone uses it.
    private struct NetworkHandle: @unchecked Sendable {
        let context: UnsafeMutablePointer<AVIOContext>
    }

    private struct OpenError: Error { var code: Int32 }

    private func open(at offset: Int64) throws(OpenError) -> UnsafeMutablePointer<AVIOContext> {
        var dictionary: OpaquePointer?
        for (key, value) in configuration.options { av_dict_set(&dictionary, key, value, 0) }
        if offset > 0 { av_dict_set(&dictionary, "offset", String(offset), 0) }
        var interrupt = AVIOInterruptCB(
            callback: { opaque in
                Unmanaged<ReadAheadInput>.fromOpaque(opaque!).takeUnretainedValue().shouldInterrupt() ? 1 : 0
            },
            opaque: Unmanaged.passUnretained(self).toOpaque())
        var network: UnsafeMutablePointer<AVIOContext>?
        let status = avio_open2(&network, url, AVIO_FLAG_READ, &interrupt, &dictionary)
        av_dict_free(&dictionary)
        guard status >= 0, let network else { throw OpenError(code: status) }
        return network
    }

    private func shouldInterrupt() -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return closed || seekTarget != nil
    }

    private func run(network initial: UnsafeMutablePointer<AVIOContext>) {
        var network: UnsafeMutablePointer<AVIOContext>? = initial
        var chunk = [UInt8](repeating: 0, count: 32 * 1024)
        var failedAttempts = 0
        defer {
            avio_closep(&network)
            condition.lock()
            readerDone = true
            condition.broadcast()
            condition.unlock()
        }
        while true {
            condition.lock()
            while !closed && seekTarget == nil && (endOfStream || failure != nil || buffer.count - head >= configuration.capacity) {
                condition.wait()
            }
            if closed {
                condition.unlock()
                return
            }
            var reopenAt: Int64? = nil
            if let target = seekTarget {
                buffer.removeAll(keepingCapacity: true)
                head = 0
                position = target
                fetchOffset = target
                endOfStream = false
                failure = nil
                reopenAt = target
            }
            let room = min(configuration.capacity - (buffer.count - head), chunk.count)
            condition.unlock()

            if let target = reopenAt {
                avio_closep(&network)
                network = try? open(at: target)
                condition.lock()
                seekTarget = nil
                if network == nil { failure = tonearm_averror_eio() }
                condition.broadcast()
                condition.unlock()
                continue
            }
            guard let connection = network else {
                // Given up (the failure is recorded); wait for a seek or close.
                condition.lock()
                if failure == nil { failure = tonearm_averror_eio() }
                condition.broadcast()
                condition.unlock()
                continue
            }
            let count = chunk.withUnsafeMutableBufferPointer { avio_read(connection, $0.baseAddress, Int32(room)) }
            condition.lock()
            if count > 0 {
                failedAttempts = 0
                buffer.append(contentsOf: chunk[0..<Int(count)])
                fetchOffset += Int64(count)
                if head > configuration.capacity / 2 {
                    buffer.removeFirst(head)
                    head = 0
                }
                condition.broadcast()
                condition.unlock()
                continue
            }
            let interrupted = closed || seekTarget != nil
            let complete = count == tonearm_averror_eof() && (size <= 0 || fetchOffset >= size)
            if interrupted {
                condition.unlock()
                continue
            }
            if complete {
                endOfStream = true
                condition.broadcast()
                condition.unlock()
                continue
            }
            // The connection dropped or stalled past its timeout: reopen where we stopped.
            let resumeAt = fetchOffset
            let lastError = count < 0 ? count : tonearm_averror_eio()
            condition.unlock()
            avio_closep(&network)
            network = reconnect(at: resumeAt, failedAttempts: &failedAttempts, lastError: lastError)
        }
    }

    /// Reopens at `offset`, at most until `maxReconnects` attempts in a row have failed; then
    /// records the failure so the demuxer sees an error instead of waiting for ever.
    private func reconnect(
        at offset: Int64, failedAttempts: inout Int, lastError: Int32
    ) -> UnsafeMutablePointer<AVIOContext>? {
        while failedAttempts < configuration.maxReconnects {
            failedAttempts += 1
            Thread.sleep(forTimeInterval: 0.1 * Double(failedAttempts))
            condition.lock()
            let stop = closed
            condition.unlock()
            if stop { return nil }
            configuration.onReconnect()
            if let network = try? open(at: offset) { return network }
        }
        condition.lock()
        failure = lastError
        condition.broadcast()
        condition.unlock()
        return nil
    }

    // MARK: Demuxer side (AVIO callbacks)

    private func read(into destination: UnsafeMutablePointer<UInt8>, size requested: Int32) -> Int32 {
        condition.lock()
        defer { condition.unlock() }
        while buffer.count - head == 0 && !endOfStream && failure == nil && !closed {
            condition.wait()
        }
        let available = buffer.count - head
        if available == 0 {
            if let failure { return failure }
            return tonearm_averror_eof()
        }
        let count = min(available, Int(requested))
        buffer.withUnsafeBufferPointer { source in
            destination.update(from: source.baseAddress! + head, count: count)
        }
        head += count
        position += Int64(count)
        condition.broadcast()
        return Int32(count)
    }

    private func seek(_ offset: Int64, whence: Int32) -> Int64 {
        condition.lock()
        defer { condition.unlock() }
        if whence & AVSEEK_SIZE != 0 { return size }
        let target: Int64
        switch whence & ~AVSEEK_FORCE {
        case SEEK_SET: target = offset
        case SEEK_CUR: target = position + offset
        case SEEK_END:
            guard size > 0 else { return Int64(tonearm_averror_eio()) }
            target = size + offset
        default: return Int64(tonearm_averror_eio())
        }
        guard target >= 0 else { return Int64(tonearm_averror_eio()) }
        // Inside what is buffered (or already consumed and still held): move without the network.
        let bufferStart = position - Int64(head)
        let bufferEnd = position + Int64(buffer.count - head)
        if target >= bufferStart && target <= bufferEnd {
            head = Int(target - bufferStart)
            position = target
            condition.broadcast()
            return target
        }
        guard size > 0 else { return Int64(tonearm_averror_eio()) }
        seekTarget = target
        condition.broadcast()
        while seekTarget != nil && !closed { condition.wait() }
        return failure.map { Int64($0) } ?? target
    }
}
