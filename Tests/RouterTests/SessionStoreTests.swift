import NIOCore
import NIOEmbedded
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct SessionStoreTests {
    func packet(_ id: SessionID, _ byte: UInt8) -> WireMessage {
        .audio(AudioPacket(sessionID: id, payload: ByteBuffer(bytes: [byte])))
    }

    func drain(_ subscription: Subscription, _ count: Int) async -> [ClientMessage] {
        var out: [ClientMessage] = []
        var iterator = subscription.messages.makeAsyncIterator()
        while out.count < count, let next = await iterator.next() { out.append(next) }
        return out
    }

    @Test func eachSubscriberGetsOnlyItsSession() async throws {
        let store = SessionStore()
        let a = try SessionID("a"), b = try SessionID("b")
        let subA = store.subscribe(a), subA2 = store.subscribe(a), subB = store.subscribe(b)
        #expect(store.findBySessionId(a)?.subscribers.count == 2)
        for i in 0..<5 {
            store.route(packet(a, UInt8(i)))
            store.route(packet(b, UInt8(100 + i)))
        }
        for sub in [subA, subA2] {
            let got = await drain(sub, 5).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
            #expect(got == [0, 1, 2, 3, 4])
        }
        let gotB = await drain(subB, 5).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
        #expect(gotB == [100, 101, 102, 103, 104])
        #expect(store.counters.framesRouted == 10)
    }

    /// After a hand-over, a client that reconnects a moment late gets the frames it missed first
    /// (the last 15 at most), then the live ones; after the window, a new client gets only live ones.
    @Test func aClientJoiningAfterAHandOverGetsTheFramesItMissedFirst() async throws {
        let store = SessionStore()
        let id = try SessionID("moved")
        store.register(id)
        store.keepCatchUp(id, until: .now + .seconds(1))
        for i in 0..<20 { store.route(packet(id, UInt8(i))) }
        let late = store.subscribe(id)
        store.route(packet(id, 20))
        let got = await drain(late, 16).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
        #expect(got == (5...20).map { UInt8($0) })

        let other = try SessionID("other")
        store.register(other)
        store.keepCatchUp(other, until: .now + .milliseconds(30))
        store.route(packet(other, 1))
        try await Task.sleep(for: .milliseconds(60))
        store.route(packet(other, 2))
        let afterWindow = store.subscribe(other)
        store.route(packet(other, 3))
        let live = await drain(afterWindow, 1).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
        #expect(live == [3])
    }

    /// A relay leaving (its Router stops) is unsubscribed and, in the same step, the frames from
    /// the next one on are kept: its client, back a moment later, gets exactly the frames its
    /// relay was not sent, then the live ones. Frames kept from earlier (a hand-over) stay kept.
    @Test func aRelayThatLeavesFindsTheFramesAfterItsLastKept() async throws {
        let store = SessionStore()
        let id = try SessionID("relayed")
        let relay = store.subscribe(id)
        for i in 0..<4 { store.route(packet(id, UInt8(i))) }
        store.unsubscribeKeepingCatchUp(id, token: relay.token, keep: .seconds(1))
        for i in 4..<8 { store.route(packet(id, UInt8(i))) }
        let sent = await drain(relay, 8).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
        #expect(sent == [0, 1, 2, 3], "the relay was sent frames after it left")
        let back = store.subscribe(id)
        store.route(packet(id, 8))
        let got = await drain(back, 5).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
        #expect(got == [4, 5, 6, 7, 8])
        #expect(store.subscriberCount(id) == 1)
    }

    @Test func packetsForUnknownSessionsAreDroppedAndCounted() throws {
        let store = SessionStore()
        store.route(packet(try SessionID("ghost"), 1))
        store.route(packet(try SessionID("ghost"), 2))
        #expect(store.counters.unknownSessionFrames == 2)
        #expect(store.findBySessionId(try SessionID("ghost")) == nil)
        store.register(try SessionID("ghost"))
        store.route(packet(try SessionID("ghost"), 3))
        #expect(store.counters.unknownSessionFrames == 2)
    }

    @Test func aSlowSubscriberLosesItsOwnOldestFramesOnly() async throws {
        let store = SessionStore(clientBufferFrames: 3)
        let id = try SessionID("a")
        let slow = store.subscribe(id)
        let fast = store.subscribe(id)
        var fastIterator = fast.messages.makeAsyncIterator()
        var fastGot: [UInt8] = []
        for i in 0..<10 {
            store.route(packet(id, UInt8(i)))
            if case .audio(let p) = await fastIterator.next() { fastGot.append(p.getInteger(at: p.readerIndex)!) }
        }
        #expect(fastGot == Array(0..<10))
        let slowGot = await drain(slow, 3).compactMap { if case .audio(let p) = $0 { p.getInteger(at: p.readerIndex, as: UInt8.self) } else { nil } }
        #expect(slowGot == [7, 8, 9])
        #expect(store.counters.slowClientDrops == 7)
    }

    @Test func unsubscribingEndsTheStream() async throws {
        let store = SessionStore()
        let id = try SessionID("a")
        let sub = store.subscribe(id)
        store.unsubscribe(id, token: sub.token)
        var iterator = sub.messages.makeAsyncIterator()
        #expect(await iterator.next() == nil)
        #expect(store.clientCount == 0)
    }

    @Test func eventsReachSubscribersAsJSONLines() async throws {
        let store = SessionStore()
        let id = try SessionID("a")
        let sub = store.subscribe(id)
        store.route(.event(WireEvent(type: .finished, sessionID: id, playID: 3, reason: .stopped)))
        guard case .event(let line) = await drain(sub, 1).first else { Issue.record("no event"); return }
        #expect(try WireEvent(jsonLine: Array(line.utf8)).reason == .stopped)
    }
}

@Suite struct BackoffTests {
    @Test func firstRetryIsFastThenDoublesUpToTwoSeconds() {
        var backoff = Backoff()
        let delays = (0..<8).map { _ in backoff.next() }
        #expect(delays == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(800),
                           .milliseconds(1600), .seconds(2), .seconds(2), .seconds(2)])
        backoff.reset()
        #expect(backoff.next() == .milliseconds(100))
    }

    enum First {}
    enum Second {}

    /// A sink that encodes a message with its kind's name, and keeps what it was given.
    final class Tagged<Kind>: ClientSink, @unchecked Sendable {
        let eventLoop: any EventLoop
        private(set) var got: [String] = []
        init(_ loop: any EventLoop) { eventLoop = loop }
        func encode(_ message: ClientMessage) -> ByteBuffer {
            guard case .audio(let packet) = message else { return ByteBuffer() }
            return ByteBuffer(string: "\(Kind.self):\(String(buffer: packet))")
        }
        func deliver(_ bytes: ByteBuffer, audio: Bool) { got.append(String(buffer: bytes)) }
    }

    /// Sinks of two kinds on one event loop (a WebSocket client and a `/listen` listener of one
    /// session on one connection loop) each get their own kind's bytes, encoded once per kind.
    @Test func sinksOfTwoKindsOnOneLoopEachGetTheirOwnEncoding() throws {
        let store = SessionStore()
        let id = try SessionID("both")
        let loop = EmbeddedEventLoop()
        let first = Tagged<First>(loop), second = Tagged<Second>(loop), another = Tagged<First>(loop)
        for sink in [first, second, another] as [any ClientSink] { _ = store.subscribe(id, kind: .listener, sink: sink) }
        store.route(.audio(AudioPacket(sessionID: id, payload: ByteBuffer(string: "x"))))
        loop.run()
        #expect(first.got == ["First:x"] && another.got == ["First:x"])
        #expect(second.got == ["Second:x"])
    }
}
