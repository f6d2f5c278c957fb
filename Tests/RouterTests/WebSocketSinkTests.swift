// A WebSocket client's sink (HTTP/WebSocketSink.swift): what it writes, in what order, and what a
// client that does not keep up loses — its own oldest frames, never an event — until it is cut.
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@testable import TonearmRouter

@Suite struct WebSocketSinkTests {
    /// What the sink reported: dropped-frame counts and disconnect reasons.
    final class Reports: Sendable {
        private let entries = Mutex<[(UInt64, String?)]>([])
        func append(_ dropped: UInt64, _ reason: String?) { entries.withLock { $0.append((dropped, reason)) } }
        var dropped: UInt64 { entries.withLock { $0.reduce(0) { $0 + $1.0 } } }
        var reasons: [String] { entries.withLock { $0.compactMap(\.1) } }
    }

    func sink(queueFrames: Int = 3, window: Int = 100, dropLimit: Int = 50) throws -> (EmbeddedChannel, WebSocketSink, Reports) {
        let channel = EmbeddedChannel()
        let reports = Reports()
        let sink = WebSocketSink(
            eventLoop: channel.eventLoop, queueFrames: queueFrames, window: SlowClientWindow(frames: window, dropLimit: dropLimit),
            closeGrace: .seconds(1)
        ) { dropped, reason in reports.append(dropped, reason) }
        try channel.pipeline.syncOperations.addHandler(sink)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return (channel, sink, reports)
    }

    func written(_ channel: EmbeddedChannel) throws -> [String] {
        var texts: [String] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { texts.append(String(buffer: buffer)) }
        return texts
    }

    @Test func aClientThatKeepsUpGetsEverythingAtOnce() throws {
        let (channel, sink, reports) = try sink()
        sink.deliver(ByteBuffer(string: "a1"), audio: true)
        sink.deliver(ByteBuffer(string: "e1"), audio: false)
        sink.deliver(ByteBuffer(string: "a2"), audio: true)
        #expect(try written(channel) == ["a1", "e1", "a2"])
        #expect(sink.waitingFrames == 0 && reports.dropped == 0)
    }

    @Test func aClientThatFallsBehindLosesItsOldestFramesAndHearsThePresent() throws {
        let (channel, sink, reports) = try sink(queueFrames: 3, window: 6)
        channel.isWritable = false
        for frame in 1...5 { sink.deliver(ByteBuffer(string: "a\(frame)"), audio: true) }
        sink.deliver(ByteBuffer(string: "e1"), audio: false)
        #expect(try written(channel).isEmpty)
        #expect(sink.waitingFrames == 3)
        // Writable again: the three newest frames, then the event that came after them.
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        #expect(try written(channel) == ["a3", "a4", "a5", "e1"])
        // The window ends with the next frame and reports what was lost in it.
        sink.deliver(ByteBuffer(string: "a6"), audio: true)
        #expect(try written(channel) == ["a6"])
        #expect(reports.dropped == 2 && reports.reasons.isEmpty)
    }

    @Test func eventsAreNeverDroppedAndKeepTheirPlace() throws {
        let (channel, sink, _) = try sink(queueFrames: 1)
        channel.isWritable = false
        sink.deliver(ByteBuffer(string: "e1"), audio: false)
        sink.deliver(ByteBuffer(string: "a1"), audio: true)
        sink.deliver(ByteBuffer(string: "e2"), audio: false)
        sink.deliver(ByteBuffer(string: "a2"), audio: true)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        #expect(try written(channel) == ["e1", "e2", "a2"])
    }

    /// A relay leaving its owner: 4012 once what waits has been written, not in its place (those
    /// frames are the relay's last before its client moves; the owner keeps the ones after).
    @Test func aMoveAfterWaitingClosesOnceWhatWaitsIsWritten() throws {
        let (channel, sink, _) = try sink(queueFrames: 5)
        channel.isWritable = false
        for frame in 1...3 { sink.deliver(ByteBuffer(string: "a\(frame)"), audio: true) }
        sink.movedAfterWaiting()
        #expect(try written(channel).isEmpty)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        var out: [ByteBuffer] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { out.append(buffer) }
        #expect(out.prefix(3).map { String(buffer: $0) } == ["a1", "a2", "a3"])
        let close = try #require(out.dropFirst(3).first)
        #expect(close.readableBytesView.first == 0x88 && out.count == 4)
        #expect(close.getInteger(at: close.readerIndex + 2, as: UInt16.self) == 4012)
        // Nothing is written after the close.
        sink.deliver(ByteBuffer(string: "a4"), audio: true)
        #expect(try written(channel).isEmpty)
    }

    @Test func aClientThatStaysBehindIsToldWhyAndCut() throws {
        let (channel, sink, reports) = try sink(queueFrames: 2, window: 100, dropLimit: 5)
        channel.isWritable = false
        for frame in 1...8 { sink.deliver(ByteBuffer(string: "a\(frame)"), audio: true) }
        #expect(reports.reasons == ["too slow: lost 6 of the last 8 audio frames"])
        #expect(reports.dropped == 6)
        // The close frame goes out (1008, policy violation) and nothing else after it.
        #expect(channel.isActive)
        let close = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(close.readableBytesView.first == 0x88)
        sink.deliver(ByteBuffer(string: "a9"), audio: true)
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        #expect(try written(channel).isEmpty)
        channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!channel.isActive)
    }
}
