// What a network container opens besides its own bytes — an HLS playlist's segments and
// variant playlists, a DASH manifest's media — each fetched like the source itself: through
// `HTTPSourceFetch` under the policy, into a read-ahead buffer of its own. Installed as the
// format context's io_open/io_close, so FFmpeg's own network code never runs.
import CFFmpeg
import Foundation

/// The nested inputs of one network source. Opened and closed on its demux thread; `cancelAll`
/// from any thread.
///
/// `@unchecked Sendable`: `live`, `byContext` and `cancelled` are guarded by `lock`; the rest is used on the demux thread only.
final class NestedInputs: @unchecked Sendable {
    private let network: SourceNetwork
    private let configuration: ReadAheadInput.Configuration
    private let lock = NSLock()
    /// Every input not yet closed, opening ones included (so `cancelAll` reaches them).
    private var live: [ObjectIdentifier: ReadAheadInput] = [:]
    private var byContext: [UnsafeMutablePointer<AVIOContext>: ReadAheadInput] = [:]
    private var cancelled = false
    /// Nested opens over the source's life; a container that opens without end is refused.
    private var opened = 0
    static let maxOpens = 100_000
    /// The first nested open that failed, to explain a read error.
    private(set) var failure: MediaError?

    init(network: SourceNetwork, configuration: ReadAheadInput.Configuration) {
        self.network = network
        self.configuration = configuration
    }

    deinit { closeAll() }

    /// Routes `format`'s nested opens through this object (it must outlive the format context).
    func install(in format: UnsafeMutablePointer<AVFormatContext>) {
        format.pointee.opaque = Unmanaged.passUnretained(self).toOpaque()
        format.pointee.io_open = { format, pb, url, flags, _ in
            guard let format, let pb, let url, let opaque = format.pointee.opaque else { return tonearm_averror_eio() }
            return Unmanaged<NestedInputs>.fromOpaque(opaque).takeUnretainedValue()
                .open(String(cString: url), flags: flags, into: pb)
        }
        format.pointee.io_close = { format, pb in
            guard let format, let pb, let opaque = format.pointee.opaque else { return }
            Unmanaged<NestedInputs>.fromOpaque(opaque).takeUnretainedValue().close(pb)
        }
    }

    private func open(_ url: String, flags: Int32, into pb: UnsafeMutablePointer<UnsafeMutablePointer<AVIOContext>?>) -> Int32 {
        guard flags & AVIO_FLAG_WRITE == 0, opened < Self.maxOpens else { return tonearm_averror_eio() }
        opened += 1
        let input = ReadAheadInput(url: url, network: network, configuration: configuration)
        lock.lock()
        live[ObjectIdentifier(input)] = input
        if cancelled { input.cancel() }
        lock.unlock()
        do {
            let context = try input.open()
            lock.lock()
            byContext[context] = input
            lock.unlock()
            pb.pointee = context
            return 0
        } catch {
            lock.lock()
            live.removeValue(forKey: ObjectIdentifier(input))
            lock.unlock()
            input.close()
            if failure == nil { failure = error }
            return tonearm_averror_eio()
        }
    }

    private func close(_ context: UnsafeMutablePointer<AVIOContext>) {
        lock.lock()
        let input = byContext.removeValue(forKey: context)
        if let input { live.removeValue(forKey: ObjectIdentifier(input)) }
        lock.unlock()
        input?.close()
    }

    /// Wakes a read waiting on any nested input (it fails) and refuses further opens. Any thread.
    func cancelAll() {
        lock.lock()
        cancelled = true
        let open = Array(live.values)
        lock.unlock()
        for input in open { input.cancel() }
    }

    /// Closes what is still open (on the demux thread, after the format context is gone).
    func closeAll() {
        lock.lock()
        let open = Array(live.values)
        live.removeAll()
        byContext.removeAll()
        lock.unlock()
        for input in open { input.close() }
    }
}
