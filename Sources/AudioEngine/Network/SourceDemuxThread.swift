// A network source's demuxer on a thread of its own. Opening (connecting, probing the format)
// and every read wait for the network; here they wait on this thread, never on a worker that
// other sessions need. Opening has a deadline (`SourceNetwork.openTimeout`): a server that sends
// a byte now and then cannot keep a source opening for ever. The thread keeps a few packets queued ahead; the worker that decodes the
// session takes them without waiting (`next` answers `.pending` when none is there, and the
// session misses that frame — counted — while every other session plays on).
import CFFmpeg
import Foundation
import NIOCore

/// Demuxes one network source ahead of its decoder.
///
/// `@unchecked Sendable`: the mutable fields are guarded by `condition`; the demuxer, the input
/// and the nested inputs are used by the thread (and their `cancel` from anywhere).
final class SourceDemuxThread: PacketSource, @unchecked Sendable {
    /// What the source turned out to hold.
    struct Opened: @unchecked Sendable {
        let info: MediaInfo
        let stream: AudioStream
    }

    /// Packets read ahead of the decoder at most (about half a second of most codecs).
    static let queueLimit = 32

    private let input: ReadAheadInput
    private let nested: NestedInputs
    private let condition = NSCondition()
    // Guarded by `condition`:
    private var opened: Result<Opened, MediaError>?
    /// Tasks waiting for the open's outcome (`opened()`).
    private var openWaiters: [CheckedContinuation<Result<Opened, MediaError>, Never>] = []
    private var deadline: Scheduled<Void>?
    /// Set when the deadline passed first: an open FFmpeg completes anyway, from the bytes it had
    /// when its reads began to fail, still counts as timed out.
    private var timeout: MediaError?
    private var queue = CircularBuffer<UnsafeMutablePointer<AVPacket>>(initialCapacity: 32)
    private var ended = false
    private var failure: MediaError?
    private var closed = false
    private var seekTarget: Int64?
    /// Seeks asked for and carried out: packets are handed out only when the two agree.
    private var requested: UInt64 = 0
    private var served: UInt64 = 0

    /// Starts fetching and opening `url` at once; nothing here waits.
    init(url: String, network: SourceNetwork, configuration: ReadAheadInput.Configuration) {
        input = ReadAheadInput(url: url, network: network, configuration: configuration)
        nested = NestedInputs(network: network, configuration: configuration)
        let timeout = network.openTimeout
        let thread = Thread { [self] in run() }
        thread.name = "tonearm-source"
        thread.stackSize = 1 << 20
        thread.start()
        let scheduled = network.group.next().scheduleTask(in: timeout) { [weak self] () -> Void in
            self?.openTimedOut(after: timeout)
        }
        condition.lock()
        if opened == nil { deadline = scheduled } else { scheduled.cancel() }
        condition.unlock()
    }

    /// The open's outcome, or nil while it is still under way.
    var openResult: Result<Opened, MediaError>? {
        condition.lock()
        defer { condition.unlock() }
        return opened
    }

    /// The open's outcome, once there is one (`/resolve` describing a source). A cancelled
    /// caller closes the source, which ends the open at once.
    func opened() async throws(MediaError) -> Opened {
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Opened, MediaError>, Never>) in
                condition.lock()
                guard let opened else {
                    openWaiters.append(continuation)
                    condition.unlock()
                    return
                }
                condition.unlock()
                continuation.resume(returning: opened)
            }
        } onCancel: {
            close()
        }
        return try result.get()
    }

    /// The deadline passed with the source still opening: its fetches stop, and the open fails
    /// with `source_timeout`.
    private func openTimedOut(after timeout: TimeAmount) {
        let seconds = timeout.nanoseconds / 1_000_000_000
        let error = MediaError(kind: .timedOut, message: "the source did not open within \(seconds) s (TONEARM_RESOLVE_TIMEOUT)")
        condition.lock()
        let opening = opened == nil && !closed
        if opening { self.timeout = error }
        condition.unlock()
        guard opening else { return }
        input.cancel(failing: error)
        nested.cancelAll()
    }

    /// Compressed bytes read ahead of the demuxer.
    var readAhead: ReadAheadInput.Stats { input.currentStats }

    func next(into packet: UnsafeMutablePointer<AVPacket>) throws(MediaError) -> PacketRead {
        condition.lock()
        defer { condition.unlock() }
        guard requested == served else { return .pending }
        if let first = queue.popFirst() {
            av_packet_move_ref(packet, first)
            var freed: UnsafeMutablePointer<AVPacket>? = first
            av_packet_free(&freed)
            condition.broadcast()
            return .packet
        }
        if let failure { throw failure }
        return ended ? .end : .pending
    }

    /// Asks the thread to seek; packets read before it are dropped, and `next` is `.pending`
    /// until it is done.
    func seek(toMS positionMS: Int64) throws(MediaError) {
        condition.lock()
        defer { condition.unlock() }
        seekTarget = positionMS
        requested &+= 1
        dropQueued()
        ended = false
        failure = nil
        condition.broadcast()
    }

    /// Ends the thread: a read it waits in fails, and it frees everything on its way out.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
        input.cancel()
        nested.cancelAll()
    }

    // MARK: The thread

    private func run() {
        var demuxer: MediaDemuxer?
        defer {
            demuxer = nil  // the format context first, then the inputs it read through
            nested.closeAll()
            input.close()
            condition.lock()
            dropQueued()
            condition.unlock()
        }
        do {
            let opening = try MediaDemuxer(url: input.url, io: try input.open(), nested: nested)
            demuxer = opening
            condition.lock()
            let late = timeout
            condition.unlock()
            if let late {
                publish(.failure(late))
                return
            }
            publish(.success(Opened(info: opening.info, stream: opening.stream)))
        } catch {
            publish(.failure(input.failedWith ?? nested.failure ?? error))
            return
        }
        guard let demuxer, let packet = av_packet_alloc() else { return }
        defer {
            var freed: UnsafeMutablePointer<AVPacket>? = packet
            av_packet_free(&freed)
        }
        while true {
            condition.lock()
            while !closed && seekTarget == nil && (queue.count >= Self.queueLimit || ended || failure != nil) {
                condition.wait()
            }
            if closed {
                condition.unlock()
                return
            }
            let generation = requested
            if let target = seekTarget {
                seekTarget = nil
                condition.unlock()
                var seekFailure: MediaError?
                do { try demuxer.seek(toMS: target) } catch { seekFailure = error }
                condition.lock()
                if requested == generation {
                    served = generation
                    failure = seekFailure
                    condition.broadcast()
                }
                condition.unlock()
                continue
            }
            condition.unlock()
            let read: Result<PacketRead, MediaError>
            do { read = .success(try demuxer.next(into: packet)) } catch { read = .failure(error) }
            condition.lock()
            defer { condition.unlock() }
            guard requested == generation, !closed else {
                av_packet_unref(packet)
                continue
            }
            switch read {
            case .success(.packet):
                if let queued = av_packet_alloc() {
                    av_packet_move_ref(queued, packet)
                    queue.append(queued)
                } else {
                    av_packet_unref(packet)
                    failure = MediaError(kind: .readFailed, message: "out of memory")
                }
            case .success(.end), .success(.pending):
                ended = true
            case .failure(let error):
                failure = input.failedWith ?? nested.failure ?? error
            }
            condition.broadcast()
        }
    }

    private func publish(_ result: Result<Opened, MediaError>) {
        condition.lock()
        opened = result
        let waiters = openWaiters
        openWaiters = []
        deadline?.cancel()
        deadline = nil
        condition.broadcast()
        condition.unlock()
        for waiter in waiters { waiter.resume(returning: result) }
    }

    /// Frees the queued packets; call holding `condition`.
    private func dropQueued() {
        while let queued = queue.popFirst() {
            var freed: UnsafeMutablePointer<AVPacket>? = queued
            av_packet_free(&freed)
        }
    }
}
