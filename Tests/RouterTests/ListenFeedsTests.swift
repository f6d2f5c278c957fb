// The Router's `/listen` feeds (Listen/ListenFeeds.swift) with the session store: the listeners of
// one session share one feed (one per kind of stream), the store counts and lists the listeners
// (not the feed), a move reaches each listener, and the last listener's going unsubscribes the feed.
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Synchronization
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct ListenFeedsTests {
    @Test func theListenersOfASessionShareOneFeedAndTheStoreCountsTheListeners() throws {
        let store = SessionStore()
        let id = try SessionID("radio")
        store.register(id)
        let feeds = ListenFeeds(store: store) { _, chains, first in
            ListenFeed(eventLoop: first.eventLoop, chains: chains, title: nil, artist: nil)
        }
        let loop = EmbeddedEventLoop()
        let helper = ListenSinkTests()
        let endings = Mutex(0)
        var listeners: [(EmbeddedChannel, ListenSink, ListenFeed, UInt64)] = []
        for chains in [true, true, false] {
            let (channel, sink, _) = try helper.sink(loop: loop) { endings.withLock { $0 += 1 } }
            let token = store.subscribe(id, kind: .listener, client: sink)
            listeners.append((channel, sink, feeds.attach(sink, to: id, variant: chains), token))
            try helper.head(channel)
        }
        loop.run()
        #expect(listeners[0].2 === listeners[1].2 && listeners[0].2 !== listeners[2].2 && feeds.count == 2)
        #expect(store.clientsByKind[.listener] == 3 && store.clients(of: id).count == 3 && store.subscriberCount(id) == 3)
        #expect(store.findBySessionId(id)?.subscribers.count == 5, "three listeners and two feeds")

        // A run is 200 ms: ten packets.
        for byte in 1...10 {
            store.route(.audio(AudioPacket(sessionID: id, payload: ByteBuffer(bytes: [0xFC, UInt8(byte)]))))
        }
        loop.run()
        let heard = try listeners.map { try helper.pages($0.0) }
        #expect(heard.allSatisfy { $0.count == 12 && $0.allSatisfy(\.checksumHolds) })
        #expect(heard[0].map(\.bytes) == heard[1].map(\.bytes), "one stream, written once")
        #expect(heard[0][0].serial != heard[2][0].serial, "chain=0 is a stream of its own")

        // A move reaches each listener (the feed has nothing to end).
        store.moveClients(of: id)
        loop.run()
        #expect(endings.withLock { $0 } == 3)

        // The last listener of a feed unsubscribes it; leaving twice is leaving once.
        for (_, sink, feed, token) in listeners {
            store.unsubscribe(id, token: token)
            feeds.detach(sink, from: feed, of: id)
            feeds.detach(sink, from: feed, of: id)
        }
        loop.run()
        #expect(feeds.count == 0 && store.findBySessionId(id)?.subscribers.isEmpty == true)
        #expect(listeners.allSatisfy { $0.2.listenerCount == 0 })
    }
}
