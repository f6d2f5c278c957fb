// A `/listen` listener's sink (Listen/ListenSink.swift): nothing before the response's head, then
// the Ogg stream of what was delivered, in order, flushed every few packets and at every event;
// titles in the first headers and in each chained stream; a listener that falls behind loses its
// own oldest packets, then is cut; after the response's end (or a refusal) nothing more.
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
        var granule: Int64
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    func sink(
        queueFrames: Int = 50, dropLimit: Int = 50, chains: Bool = true, title: String? = "first",
        ended: @escaping @Sendable () -> Void = {}
    ) throws -> (EmbeddedChannel, ListenSink, Reports) {
        let channel = EmbeddedChannel()
        let reports = Reports()
        let sink = ListenSink(
            eventLoop: channel.eventLoop, queueFrames: queueFrames, window: SlowClientWindow(frames: 100, dropLimit: dropLimit),
            closeGrace: .seconds(1), chains: chains, title: title, artist: nil, ended: ended
        ) { dropped, reason in reports.append(dropped, reason) }
        try channel.pipeline.syncOperations.addHandler(sink)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return (channel, sink, reports)
    }

    func head(_ channel: EmbeddedChannel, _ status: HTTPResponseStatus = .ok) throws {
        try channel.writeOutbound(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: status)))
        guard case .head = try channel.readOutbound(as: HTTPServerResponsePart.self) else { throw CancellationError() }
    }

    func packet(_ value: Int) -> ByteBuffer {
        let byte = UInt8(truncatingIfNeeded: value)
        return ByteBuffer(bytes: [0xFC, byte, byte, byte])
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
            let count = Int(bytes[at + 26])
            let length = bytes[at + 27..<at + 27 + count].reduce(0) { $0 + Int($1) }
            let start = at + 27 + count
            pages.append(Page(flags: bytes[at + 5], serial: serial, granule: granule, body: Array(bytes[start..<start + length])))
            at = start + length
        }
        return pages
    }

    static let ready = #"{"type":"ready","session_id":"s","title":"second","artist":"someone"}"#
    static let progress = #"{"type":"progress","session_id":"s","position_ms":1000}"#

    @Test func theStreamBeginsAtTheHeadAndIsFlushedEveryFewPacketsAndAtEachEvent() throws {
        let (channel, sink, reports) = try sink()
        for byte in 1...3 { sink.deliver(packet(byte), audio: true) }
        #expect(try pages(channel).isEmpty, "nothing before the response's head")
        // The waiting packets go out with the head.
        try head(channel)
        let first = try pages(channel)
        #expect(first.count == 5 && first[0].text.hasPrefix("OpusHead") && first[0].flags == 0x02)
        #expect(first[1].text.hasPrefix("OpusTags") && first[1].text.contains("title=first"))
        #expect(first[2...].map(\.body) == (1...3).map { Array(packet($0).readableBytesView) })
        #expect(first[2...].map(\.granule) == [960, 1920, 2880])
        // Then every fifth packet flushes.
        for byte in 4...7 { sink.deliver(packet(byte), audio: true) }
        #expect(try pages(channel).isEmpty)
        sink.deliver(packet(8), audio: true)
        #expect(try pages(channel).map(\.granule) == [3840, 4800, 5760, 6720, 7680])
        // And any event.
        sink.deliver(packet(9), audio: true)
        #expect(try pages(channel).isEmpty)
        sink.deliver(ByteBuffer(string: Self.progress), audio: false)
        #expect(try pages(channel).map(\.granule) == [8640])
        #expect(sink.waitingFrames == 0 && reports.dropped == 0)
    }

    @Test func eachTrackChainsAStreamWithItsTitleOrNotWithChainOff() throws {
        for chains in [true, false] {
            let (channel, sink, _) = try sink(chains: chains, title: nil)
            try head(channel)
            // A track that starts before the first packet names the first headers.
            sink.deliver(ByteBuffer(string: Self.ready), audio: false)
            for byte in 1...5 { sink.deliver(packet(byte), audio: true) }
            let first = try pages(channel)
            #expect(first[1].text.contains("title=second") && first[1].text.contains("artist=someone"))
            sink.deliver(ByteBuffer(string: Self.ready.replacingOccurrences(of: "second", with: "third")), audio: false)
            for byte in 6...10 { sink.deliver(packet(byte), audio: true) }
            let next = try pages(channel)
            if chains {
                // The stream ends (EOS, its last granule) and a new one begins with the new title.
                #expect(next[0].flags == 0x04 && next[0].granule == 4800 && next[0].serial == first[0].serial)
                #expect(next[1].text.hasPrefix("OpusHead") && next[1].serial != first[0].serial)
                #expect(next[2].text.contains("title=third") && next[3].granule == 960 && next.count == 8)
            } else {
                #expect(next.count == 5 && next.allSatisfy { $0.serial == first[0].serial } && next[0].granule == 5760)
            }
        }
    }

    @Test func aListenerThatFallsBehindLosesItsOldestPacketsThenIsCut() throws {
        let (channel, sink, reports) = try sink(queueFrames: 3, dropLimit: 5)
        try head(channel)
        channel.isWritable = false
        for byte in 1...5 { sink.deliver(packet(byte), audio: true) }
        #expect(sink.waitingFrames == 3 && reports.dropped == 0)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        sink.deliver(ByteBuffer(string: Self.progress), audio: false)
        // The three newest: the listener hears the present.
        #expect(try pages(channel).dropFirst(2).map { $0.body[1] } == [3, 4, 5])
        channel.isWritable = false
        for byte in 6...14 { sink.deliver(packet(byte), audio: true) }
        #expect(reports.reasons == ["too slow: lost 6 of the last 12 audio frames"])
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }

    @Test func aRefusalOrTheEndOfTheResponseGetsNoPages() throws {
        let (refused, refusedSink, _) = try sink()
        try head(refused, .notFound)
        for byte in 1...5 { refusedSink.deliver(packet(byte), audio: true) }
        #expect(try pages(refused).isEmpty)

        let (channel, sink, _) = try sink()
        try head(channel)
        for byte in 1...5 { sink.deliver(packet(byte), audio: true) }
        #expect(try pages(channel).count == 7)
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        _ = try channel.readOutbound(as: HTTPServerResponsePart.self)
        for byte in 6...10 { sink.deliver(packet(byte), audio: true) }
        // A later answer on the same connection passes by untouched.
        try head(channel)
        for byte in 11...15 { sink.deliver(packet(byte), audio: true) }
        #expect(try pages(channel).isEmpty)
    }

    /// The session moved to another pair, or the Router stops: what was written goes out, the
    /// response is told to end (once), and nothing more is written; stopping also cuts the
    /// connection after its grace, a move does not.
    @Test func aMoveOrAShutdownEndsTheResponseAfterWhatWasWritten() throws {
        for stopping in [false, true] {
            let endings = Mutex(0)
            let (channel, sink, _) = try sink { endings.withLock { $0 += 1 } }
            try head(channel)
            for byte in 1...3 { sink.deliver(packet(byte), audio: true) }
            if stopping { sink.leave(grace: .seconds(1)) } else { sink.moved() }
            #expect(try pages(channel).count == 5, "the three packets written go out")
            sink.moved()
            sink.deliver(packet(4), audio: true)
            sink.deliver(ByteBuffer(string: Self.progress), audio: false)
            #expect(try pages(channel).isEmpty && endings.withLock { $0 } == 1)
            channel.embeddedEventLoop.advanceTime(by: .seconds(2))
            #expect(channel.isActive == !stopping)
        }
    }
}
