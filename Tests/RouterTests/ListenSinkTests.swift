// A `/listen` listener (Listen/ListenSink.swift) fed by its session's stream (Listen/ListenFeed.swift):
// nothing before the response's head, then the stream's headers of its own and the runs of pages
// as they came, flushed at each run (every fifth packet) and at every event; titles in the first
// headers and in each chained stream; a listener who joins later gets the same bytes after its
// own headers, numbered so that no page is missing; one that falls behind loses its own oldest
// runs, then is cut; after the response's end (or a refusal) nothing more.
import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Synchronization
import Testing

@testable import TonearmRouter

@Suite struct ListenSinkTests {
    typealias Reports = WebSocketSinkTests.Reports

    /// One Ogg page as a player reads it.
    struct Page: Equatable {
        var flags: UInt8
        var serial: UInt32
        var sequence: UInt32
        var granule: Int64
        var body: [UInt8]
        var bytes: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
        /// The page's checksum holds (its field read as zero).
        var checksumHolds: Bool {
            var zeroed = bytes
            let stored = (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[22 + $1]) << (8 * $1) }
            for index in 22..<26 { zeroed[index] = 0 }
            return OggCRC.checksum(zeroed) == stored
        }
    }

    /// A listener on a channel of its own; `loop` shares another channel's loop.
    func sink(
        queueFrames: Int = 50, dropLimit: Int = 50, loop: EmbeddedEventLoop = EmbeddedEventLoop(),
        ended: @escaping @Sendable () -> Void = {}
    ) throws -> (EmbeddedChannel, ListenSink, Reports) {
        let channel = EmbeddedChannel(loop: loop)
        let reports = Reports()
        let sink = ListenSink(
            eventLoop: channel.eventLoop, queueFrames: queueFrames, window: SlowClientWindow(frames: 100, dropLimit: dropLimit),
            closeGrace: .seconds(1), ended: ended
        ) { dropped, reason in reports.append(dropped, reason) }
        try channel.pipeline.syncOperations.addHandler(sink)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return (channel, sink, reports)
    }

    /// A session's stream with `sink` listening, on the sink's loop.
    func feed(_ sink: ListenSink, chains: Bool = true, title: String? = "first") -> ListenFeed {
        let feed = ListenFeed(eventLoop: sink.eventLoop, chains: chains, title: title, artist: nil, runPackets: 5)
        feed.add(sink)
        return feed
    }

    func head(_ channel: EmbeddedChannel, _ status: HTTPResponseStatus = .ok) throws {
        try channel.writeOutbound(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: status)))
        guard case .head = try channel.readOutbound(as: HTTPServerResponsePart.self) else { throw CancellationError() }
    }

    func packet(_ value: Int) -> ByteBuffer {
        let byte = UInt8(truncatingIfNeeded: value)
        return ByteBuffer(bytes: [0xFC, byte, byte, byte])
    }

    func play(_ feed: ListenFeed, _ values: ClosedRange<Int>) {
        for value in values { feed.deliver(packet(value), audio: true) }
    }

    /// The pages flushed so far.
    func pages(_ channel: EmbeddedChannel) throws -> [Page] {
        var bytes: [UInt8] = []
        while let part = try channel.readOutbound(as: HTTPServerResponsePart.self) {
            if case .body(.byteBuffer(let buffer)) = part { bytes += buffer.readableBytesView }
        }
        var pages: [Page] = []
        var at = 0
        while at + 27 <= bytes.count {
            #expect(Array(bytes[at..<at + 4]) == Array("OggS".utf8))
            let granule = (0..<8).reduce(Int64(0)) { $0 | Int64(bytes[at + 6 + $1]) << (8 * $1) }
            let serial = (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[at + 14 + $1]) << (8 * $1) }
            let sequence = (0..<4).reduce(UInt32(0)) { $0 | UInt32(bytes[at + 18 + $1]) << (8 * $1) }
            let count = Int(bytes[at + 26])
            let length = bytes[at + 27..<at + 27 + count].reduce(0) { $0 + Int($1) }
            let start = at + 27 + count
            pages.append(
                Page(
                    flags: bytes[at + 5], serial: serial, sequence: sequence, granule: granule,
                    body: Array(bytes[start..<start + length]), bytes: Array(bytes[at..<start + length])))
            at = start + length
        }
        #expect(at == bytes.count, "a page cut short")
        return pages
    }

    static let ready = #"{"type":"ready","session_id":"s","title":"second","artist":"someone"}"#
    static let progress = #"{"type":"progress","session_id":"s","position_ms":1000}"#

    @Test func theStreamBeginsAtTheHeadAndIsFlushedAtEachRunAndAtEachEvent() throws {
        let (channel, sink, reports) = try sink()
        let feed = feed(sink)
        play(feed, 1...5)
        #expect(try pages(channel).isEmpty, "nothing before the response's head")
        // The waiting run goes out with the head, after the listener's own headers.
        try head(channel)
        let first = try pages(channel)
        #expect(first.count == 7 && first[0].text.hasPrefix("OpusHead") && first[0].flags == 0x02)
        #expect(first[1].text.hasPrefix("OpusTags") && first[1].text.contains("title=first"))
        #expect(first[2...].map(\.body) == (1...5).map { Array(packet($0).readableBytesView) })
        #expect(first.map(\.granule) == [0, 0, 960, 1920, 2880, 3840, 4800])
        #expect(first.map(\.sequence) == Array(0...6) && first.allSatisfy(\.checksumHolds))
        // Then every fifth packet is a run, and goes out.
        play(feed, 6...9)
        #expect(try pages(channel).isEmpty)
        play(feed, 10...10)
        #expect(try pages(channel).map(\.granule) == [5760, 6720, 7680, 8640, 9600])
        // And any event sends what was gathered.
        play(feed, 11...11)
        #expect(try pages(channel).isEmpty)
        feed.deliver(ByteBuffer(string: Self.progress), audio: false)
        #expect(try pages(channel).map(\.granule) == [10560])
        #expect(sink.waitingFrames == 0 && reports.dropped == 0)
    }

    /// A listener who arrives later — on another event loop — gets its own headers naming the
    /// track playing, then the pages the first listener got renumbered to follow them (their
    /// checksums mended): no page of its stream is missing, none numbered twice. From the next
    /// track's chain on, both get the very same bytes.
    @Test func aLaterListenerGetsTheSamePagesAfterItsOwnHeaders() throws {
        let (early, earlySink, _) = try sink()
        let feed = feed(earlySink)
        try head(early)
        play(feed, 1...5)
        feed.deliver(ByteBuffer(string: Self.ready), audio: false)
        play(feed, 6...10)
        let (late, lateSink, _) = try sink()
        feed.add(lateSink)
        try head(late)
        play(feed, 11...20)
        late.embeddedEventLoop.run()
        _ = try pages(early)
        let earlyPages = try { () throws -> [Page] in
            play(feed, 21...25)
            return try pages(early)
        }()
        late.embeddedEventLoop.run()
        var latePages = try pages(late)
        #expect(latePages.count == 2 + 15)
        #expect(latePages[0].flags == 0x02 && latePages[1].text.contains("title=second") && latePages[1].text.contains("artist=someone"))
        #expect(Set(latePages.map(\.serial)).count == 1 && latePages.allSatisfy(\.checksumHolds))
        #expect(latePages.map(\.sequence) == Array(0...16))
        // The new track's stream began five packets before the listener did.
        #expect(latePages[2].granule == 6 * 960 && latePages[2].body == Array(packet(11).readableBytesView))
        #expect(latePages.suffix(5).map(\.body) == earlyPages.map(\.body) && latePages.suffix(5).map(\.granule) == earlyPages.map(\.granule))

        // The next track: the end of the late listener's stream is numbered as its own, then both
        // get one stream from page 0, byte for byte.
        feed.deliver(ByteBuffer(string: Self.ready.replacingOccurrences(of: "second", with: "third")), audio: false)
        play(feed, 26...30)
        late.embeddedEventLoop.run()
        latePages = try pages(late)
        let next = try pages(early)
        #expect(latePages[0].flags == 0x04 && latePages[0].sequence == 17 && latePages[0].checksumHolds)
        #expect(latePages.dropFirst().map(\.bytes) == next.dropFirst().map(\.bytes) && next[1].sequence == 0)
    }

    @Test func eachTrackChainsAStreamWithItsTitleOrNotWithChainOff() throws {
        for chains in [true, false] {
            let (channel, sink, _) = try sink()
            let feed = feed(sink, chains: chains, title: nil)
            try head(channel)
            // A track that starts before the first packet names the first headers.
            feed.deliver(ByteBuffer(string: Self.ready), audio: false)
            play(feed, 1...5)
            let first = try pages(channel)
            #expect(first[1].text.contains("title=second") && first[1].text.contains("artist=someone"))
            feed.deliver(ByteBuffer(string: Self.ready.replacingOccurrences(of: "second", with: "third")), audio: false)
            play(feed, 6...10)
            let next = try pages(channel)
            if chains {
                // The stream ends (EOS, its last granule) and a new one begins with the new title.
                #expect(next[0].flags == 0x04 && next[0].granule == 4800 && next[0].serial == first[0].serial)
                #expect(next[1].text.hasPrefix("OpusHead") && next[1].serial != first[0].serial && next[1].sequence == 0)
                #expect(next[2].text.contains("title=third") && next[3].granule == 960 && next[3].sequence == 2 && next.count == 8)
            } else {
                #expect(next.count == 5 && next.allSatisfy { $0.serial == first[0].serial } && next[0].granule == 5760)
            }
        }
    }

    /// A listener whose first run comes after a chain never sees the chain's end of a stream it
    /// did not hear: it begins with its own headers of the new stream, titled.
    @Test func aListenerWhoBeginsAfterAChainBeginsTheNewStream() throws {
        let (channel, sink, _) = try sink()
        let feed = ListenFeed(eventLoop: sink.eventLoop, chains: true, title: "first", artist: nil, runPackets: 5)
        play(feed, 1...5)
        feed.add(sink)
        try head(channel)
        feed.deliver(ByteBuffer(string: Self.ready), audio: false)
        play(feed, 6...10)
        let pages = try pages(channel)
        #expect(pages.map(\.flags) == [0x02, 0, 0, 0, 0, 0, 0] && pages.map(\.sequence) == Array(0...6))
        #expect(pages[1].text.contains("title=second"))
    }

    @Test func aListenerThatFallsBehindLosesItsOldestRunsThenIsCut() throws {
        let (channel, sink, reports) = try sink(queueFrames: 10, dropLimit: 12)
        let feed = feed(sink)
        try head(channel)
        channel.isWritable = false
        play(feed, 1...15)
        #expect(sink.waitingFrames == 10 && reports.dropped == 0)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        // The two newest runs: the listener hears the present.
        #expect(try pages(channel).dropFirst(2).map { $0.body[1] } == Array(6...15))
        channel.isWritable = false
        play(feed, 16...35)
        #expect(reports.reasons == ["too slow: lost 13 of the last 33 audio frames"])
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }

    @Test func aRefusalOrTheEndOfTheResponseGetsNoPages() throws {
        let (refused, refusedSink, _) = try sink()
        let refusedFeed = feed(refusedSink)
        try head(refused, .notFound)
        play(refusedFeed, 1...5)
        #expect(try pages(refused).isEmpty)

        let (channel, sink, _) = try sink()
        let feed = feed(sink)
        try head(channel)
        play(feed, 1...5)
        #expect(try pages(channel).count == 7)
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        _ = try channel.readOutbound(as: HTTPServerResponsePart.self)
        play(feed, 6...10)
        // A later answer on the same connection passes by untouched.
        try head(channel)
        play(feed, 11...15)
        #expect(try pages(channel).isEmpty)
    }

    /// The session moved to another pair, or the Router stops: what was written goes out, the
    /// response is told to end (once), and nothing more is written; stopping also cuts the
    /// connection after its grace, a move does not.
    @Test func aMoveOrAShutdownEndsTheResponseAfterWhatWasWritten() throws {
        for stopping in [false, true] {
            let endings = Mutex(0)
            let (channel, sink, _) = try sink { endings.withLock { $0 += 1 } }
            let feed = feed(sink)
            try head(channel)
            play(feed, 1...3)
            feed.deliver(ByteBuffer(string: Self.progress), audio: false)
            if stopping { sink.leave(grace: .seconds(1)) } else { sink.moved() }
            #expect(try pages(channel).count == 5, "the three packets written go out")
            sink.moved()
            play(feed, 4...8)
            feed.deliver(ByteBuffer(string: Self.progress), audio: false)
            #expect(try pages(channel).isEmpty && endings.withLock { $0 } == 1)
            channel.embeddedEventLoop.advanceTime(by: .seconds(2))
            #expect(channel.isActive == !stopping)
        }
    }
}
