// Everything one pacer tick writes: the full batch for connections that keep up, and the same
// batch without audio for those that do not (events are never dropped; their order is kept).
import NIOCore
import WireProtocol

/// The bytes of one tick, built once and written to every Router connection.
package struct TickBatch {
    package private(set) var all: ByteBuffer
    private(set) var eventsOnly: ByteBuffer
    package private(set) var frames = 0
    private(set) var events = 0

    package static let minimumCapacity = 4_096

    package init(allocator: ByteBufferAllocator = ByteBufferAllocator(), capacity: Int = minimumCapacity) {
        all = allocator.buffer(capacity: capacity)
        eventsOnly = allocator.buffer(capacity: 256)
    }

    var isEmpty: Bool { frames == 0 && events == 0 }

    mutating func append(_ event: WireEvent) {
        let start = all.writerIndex
        all.writeEvent(event)
        var line = all.getSlice(at: start, length: all.writerIndex - start)!
        eventsOnly.writeBuffer(&line)
        events += 1
    }

    /// The same tick with its audio removed and its events kept.
    func withoutAudio() -> TickBatch {
        var copy = self
        copy.all = eventsOnly
        copy.frames = 0
        return copy
    }

    /// Adds one session's packet; false (and nothing written) for a packet no frame can carry.
    /// Packets come from libopus or a passthrough source's validated single frames, both far
    /// inside the cap, so false means a bug upstream: the frame is lost, never the engine.
    @discardableResult
    mutating func append(_ packet: [UInt8], for sessionID: SessionID) -> Bool {
        do {
            try all.writeAudioPacket(sessionID: sessionID, payload: packet)
        } catch {
            return false
        }
        frames += 1
        return true
    }
}
