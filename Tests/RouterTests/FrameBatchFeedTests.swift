// Several frames per WebSocket message (HTTP/FrameBatchFeed.swift): each binary message holds
// `frames` packets as [u16 BE length][packet], built once for every client that asked for that
// many; an event sends what was gathered first, then itself; a client that falls behind loses
// whole messages, counted as their frames; the store counts the clients, not the feed.
import NIOCore
import NIOEmbedded
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct FrameBatchFeedTests {
    /// One WebSocket frame as a client reads it: a text, or the packets of a binary message.
    enum Message: Equatable {
        case text(String)
        case packets([[UInt8]])
    }

    func sink(_ loop: EmbeddedEventLoop, frames: Int, queueFrames: Int = 50, dropLimit: Int = 50) throws
        -> (EmbeddedChannel, WebSocketSink, WebSocketSinkTests.Reports)
    {
        let channel = EmbeddedChannel(loop: loop)
        let reports = WebSocketSinkTests.Reports()
        let sink = WebSocketSink(
            eventLoop: loop, queueFrames: queueFrames, window: SlowClientWindow(frames: 100, dropLimit: dropLimit),
            closeGrace: .seconds(1), framesPerMessage: frames
        ) { dropped, reason in reports.append(dropped, reason) }
        try channel.pipeline.syncOperations.addHandler(sink)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return (channel, sink, reports)
    }

    /// The messages written so far (unmasked server frames, payloads under 126 bytes).
    func messages(_ channel: EmbeddedChannel) throws -> [Message] {
        var out: [Message] = []
        while var buffer = try channel.readOutbound(as: ByteBuffer.self) {
            guard let first = buffer.readInteger(as: UInt8.self), let length = buffer.readInteger(as: UInt8.self),
                var payload = buffer.readSlice(length: Int(length))
            else { throw CancellationError() }
            if first == 0x81 {
                out.append(.text(String(buffer: payload)))
                continue
            }
            #expect(first == 0x82)
            var packets: [[UInt8]] = []
            while let size = payload.readInteger(as: UInt16.self), let packet = payload.readBytes(length: Int(size)) {
                packets.append(packet)
            }
            #expect(payload.readableBytes == 0)
            out.append(.packets(packets))
        }
        return out
    }

    func packet(_ value: Int) -> ByteBuffer { ByteBuffer(bytes: [0xFC, UInt8(value), UInt8(value)]) }

    @Test func framesGoOutSeveralToAMessageAndAnEventSendsWhatWasGatheredFirst() throws {
        let loop = EmbeddedEventLoop()
        let feed = FrameBatchFeed(eventLoop: loop, framesPerMessage: 3)
        let (first, firstSink, _) = try sink(loop, frames: 3)
        let (second, secondSink, _) = try sink(loop, frames: 3)
        feed.add(firstSink)
        feed.add(secondSink)
        for value in 1...7 { feed.deliver(feed.encode(.audio(packet(value))), audio: true) }
        feed.deliver(feed.encode(.event(#"{"type":"paused"}"#)), audio: false)
        feed.deliver(feed.encode(.audio(packet(8))), audio: true)
        let expected: [Message] = [
            .packets((1...3).map { [0xFC, UInt8($0), UInt8($0)] }), .packets((4...6).map { [0xFC, UInt8($0), UInt8($0)] }),
            .packets([[0xFC, 7, 7]]), .text(#"{"type":"paused"}"#),
        ]
        #expect(try messages(first) == expected)
        #expect(try messages(second) == expected)
        // One client leaves; the other goes on.
        feed.remove(firstSink)
        for value in 9...10 { feed.deliver(feed.encode(.audio(packet(value))), audio: true) }
        #expect(try messages(first).isEmpty)
        #expect(try messages(second) == [.packets((8...10).map { [0xFC, UInt8($0), UInt8($0)] })])
        #expect(feed.clientCount == 1)
    }

    /// The queue holds a second of audio whatever the message size (50 frames: 5 messages of 10),
    /// and a lost message counts as its frames against the slow-client limit.
    @Test func aClientThatFallsBehindLosesWholeMessagesCountedAsTheirFrames() throws {
        let loop = EmbeddedEventLoop()
        let feed = FrameBatchFeed(eventLoop: loop, framesPerMessage: 10)
        let (channel, sink, reports) = try sink(loop, frames: 10, queueFrames: 50, dropLimit: 25)
        feed.add(sink)
        channel.isWritable = false
        for value in 1...60 { feed.deliver(feed.encode(.audio(packet(value))), audio: true) }
        #expect(sink.waitingFrames == 5 && reports.reasons.isEmpty)
        for value in 61...80 { feed.deliver(feed.encode(.audio(packet(value))), audio: true) }
        #expect(reports.reasons == ["too slow: lost 26 of the last 76 audio frames"])
    }

    /// Clients asking for 3 frames share one feed, one asking for 5 has its own; the store lists
    /// the three clients, not the feeds, and the last client's going unsubscribes its feed.
    @Test func clientsOfOneSizeShareAFeedAndTheStoreCountsTheClients() throws {
        let store = SessionStore()
        let id = try SessionID("guild")
        store.register(id)
        let loop = EmbeddedEventLoop()
        let feeds = FrameBatchFeeds(store: store) { _, frames, first in
            FrameBatchFeed(eventLoop: first.eventLoop, framesPerMessage: frames)
        }
        var clients: [(EmbeddedChannel, WebSocketSink, FrameBatchFeed, UInt64)] = []
        for frames in [3, 3, 5] {
            let (channel, sink, _) = try sink(loop, frames: frames)
            clients.append((channel, sink, feeds.attach(sink, to: id, variant: frames), store.subscribe(id, kind: .bot, client: sink)))
        }
        loop.run()
        #expect(clients[0].2 === clients[1].2 && clients[0].2 !== clients[2].2 && feeds.count == 2)
        #expect(store.clientsByKind[.bot] == 3 && store.clientsByKind[.listener] == 0 && store.subscriberCount(id) == 3)
        for value in 1...15 { store.route(.audio(AudioPacket(sessionID: id, payload: packet(value)))) }
        loop.run()
        #expect(try messages(clients[0].0).count == 5 && messages(clients[1].0).count == 5 && messages(clients[2].0).count == 3)
        for (_, sink, feed, token) in clients {
            store.unsubscribe(id, token: token)
            feeds.detach(sink, from: feed, of: id)
        }
        loop.run()
        #expect(feeds.count == 0 && store.findBySessionId(id)?.subscribers.isEmpty == true)
    }
}
