// One session's Ogg stream, written once for all its `/listen` listeners. The feed is the
// session store's one subscriber for them: it wraps each packet in a page of the session's own
// stream, gathers the pages of 200 ms into one run, and hands that run — the same bytes — to
// every listener on its event loop. A listener only writes the run: no page, checksum or copy
// of its own (before the feed, each built its own stream, and 1,000 listeners of one session
// cost a quarter of a core). Two feeds at most per session: one whose stream is chained at each
// track (with its title), one that is a single stream (`chain=0`).
import NIOCore
import WireProtocol

/// Whole pages of a feed's stream, the same bytes for every listener.
struct OggRun: Sendable {
    enum Kind: Sendable, Equatable {
        /// Audio pages: a listener that stays behind may lose a run of them.
        case audio
        /// The end of one logical stream and the headers of the next (a new track): never lost;
        /// skipped by a listener who has not begun (its own headers name the new stream).
        case chain
    }

    let kind: Kind
    let pages: ByteBuffer
    /// The logical stream of an audio run, and the sequence number of its first page: a listener
    /// who begins with it writes the stream's headers as its pages 0 and 1, and renumbers.
    let serial: UInt32
    let firstSequence: UInt32
    /// Audio packets in the run (0 in a chain).
    let packets: Int
    /// The track playing when the run was written, for a listener's own headers.
    let title: String?
    let artist: String?
    /// Where each page a listener may renumber begins in `pages`, with its `OggCRC.shift`: every
    /// page of an audio run; a chain's first page (the end of the stream before it).
    let marks: [Mark]

    struct Mark: Sendable {
        let offset: Int
        let shift: UInt32
    }

    /// The pages with each marked page's sequence number `offset` lower, and its checksum to
    /// match: for a listener whose headers numbered its stream from 0 (a copy; the run itself
    /// when `offset` is 0).
    func pages(renumberedBy offset: UInt32) -> ByteBuffer {
        guard offset != 0 else { return pages }
        var copy = pages
        for mark in marks {
            let at = copy.readerIndex + mark.offset
            guard let old = copy.getInteger(at: at + 18, endianness: .little, as: UInt32.self),
                let checksum = copy.getInteger(at: at + 22, endianness: .little, as: UInt32.self)
            else { continue }
            let new = old &- offset
            copy.setInteger(new, at: at + 18, endianness: .little)
            copy.setInteger(OggCRC.renumbered(checksum, from: old, to: new, shift: mark.shift), at: at + 22, endianness: .little)
        }
        return copy
    }
}

/// The Router's `/listen` feeds, one per session and kind of stream while it has listeners.
typealias ListenFeeds = SessionFeeds<ListenFeed>

/// The Ogg stream of one session (chained or not) and the listeners it is written to. Confined
/// to `eventLoop`: the store delivers to it there, and listeners come and go there.
final class ListenFeed: SessionFeed, @unchecked Sendable {
    let eventLoop: any EventLoop
    let chains: Bool
    var variant: Bool { chains }
    /// Packets per run: 10 (200 ms) unless told. A player buffers seconds; a write per listener
    /// per run, not per packet, is what makes a listener cheap (its syscall and the kernel's TCP
    /// work are most of what it costs: runs of 100 ms cost 101 µs per listener-second, of 200 ms 51 µs).
    private let runPackets: Int
    private var ogg = OggOpusWriter()
    private var title: String?, artist: String?
    private var pending = ByteBuffer()
    private var pendingPackets = 0
    private var pendingFirst: UInt32 = 0
    private var pendingMarks: [OggRun.Mark] = []
    private var listeners = FeedClients<ListenSink>()

    init(eventLoop: any EventLoop, chains: Bool, title: String?, artist: String?, runPackets: Int = 10) {
        self.eventLoop = eventLoop
        self.chains = chains
        self.title = title
        self.artist = artist
        self.runPackets = max(1, runPackets)
    }

    /// Listeners written to (tests read it).
    var listenerCount: Int { listeners.count }

    func add(_ sink: ListenSink) { listeners.add(sink) }

    func remove(_ sink: ListenSink) { listeners.remove(sink) }

    /// The packet itself, or the event's line: pages are made once, in `deliver`.
    func encode(_ message: ClientMessage) -> ByteBuffer {
        switch message {
        case .audio(let packet): packet
        case .event(let line): ByteBuffer(string: line)
        }
    }

    func deliver(_ bytes: ByteBuffer, audio: Bool) {
        guard audio else {
            // What was written goes out now: before a new track's pages, and when the session
            // pauses or stops (any other event).
            emitPending()
            // `ready` comes just before its play's first packet (docs/wire-protocol.md).
            if let ready = ClientConnections.trackStart(String(buffer: bytes)) {
                if chains, ogg.hasAudio {
                    let pages = ogg.chain(title: ready.title, artist: ready.artist)
                    emit(
                        OggRun(
                            kind: .chain, pages: pages, serial: ogg.serial, firstSequence: 0, packets: 0,
                            title: ready.title, artist: ready.artist, marks: [.init(offset: 0, shift: OggCRC.emptyPageShift)]))
                }
                (title, artist) = (ready.title, ready.artist)
            }
            return
        }
        if pendingPackets == 0 { pendingFirst = ogg.sequence }
        let offset = pending.readableBytes
        guard let shift = ogg.append(bytes, to: &pending) else { return }
        pendingMarks.append(.init(offset: offset, shift: shift))
        pendingPackets += 1
        if pendingPackets >= runPackets { emitPending() }
    }

    private func emitPending() {
        guard pendingPackets > 0 else { return }
        let run = OggRun(
            kind: .audio, pages: pending, serial: ogg.serial, firstSequence: pendingFirst, packets: pendingPackets,
            title: title, artist: artist, marks: pendingMarks)
        pending = ByteBufferAllocator().buffer(capacity: run.pages.readableBytes)
        pendingMarks = []
        pendingMarks.reserveCapacity(runPackets)
        pendingPackets = 0
        emit(run)
    }

    private func emit(_ run: OggRun) {
        listeners.forEach(on: eventLoop) { $0.take(run) }
    }
}
