// The Router's `/listen` feeds: one per session and kind of stream (chained or not) while it has
// listeners. A listener is attached to its session's feed, which is made and subscribed to the
// session store for the first, and unsubscribed when the last one leaves.
import NIOCore
import Synchronization
import WireProtocol

final class ListenFeeds: Sendable {
    private struct Key: Hashable {
        let id: SessionID
        let chains: Bool
    }

    private struct Kept {
        let feed: ListenFeed
        /// The feed's subscription to the store.
        let token: UInt64
        var listeners: Set<ObjectIdentifier>
    }

    private let store: SessionStore
    private let feeds = Mutex<[Key: Kept]>([:])

    init(store: SessionStore) {
        self.store = store
    }

    /// Feeds with listeners (tests and metrics read it).
    var count: Int { feeds.withLock { $0.count } }

    /// Gives `sink` the runs of `id`'s stream from the next one on; call `detach` when it goes.
    /// The caller keeps the session pinned (`SessionDirectory.using`) while it attaches.
    func attach(_ sink: ListenSink, to id: SessionID, chains: Bool) -> ListenFeed {
        let key = Key(id: id, chains: chains)
        let feed = feeds.withLock { feeds -> ListenFeed in
            if let kept = feeds[key] {
                feeds[key]?.listeners.insert(ObjectIdentifier(sink))
                return kept.feed
            }
            let last = store.findBySessionId(id)?.lastTrackStart
            let feed = ListenFeed(eventLoop: sink.eventLoop, chains: chains, title: last?.title, artist: last?.artist)
            feeds[key] = Kept(feed: feed, token: store.subscribeFeed(id, sink: feed), listeners: [ObjectIdentifier(sink)])
            return feed
        }
        feed.eventLoop.execute { feed.add(sink) }
        return feed
    }

    /// `sink` gets nothing more from `feed`; the last listener's going unsubscribes the feed.
    /// Once or more: a second call does nothing.
    func detach(_ sink: ListenSink, from feed: ListenFeed, of id: SessionID) {
        let key = Key(id: id, chains: feed.chains)
        let unsubscribe = feeds.withLock { feeds -> UInt64? in
            guard let kept = feeds[key], kept.feed === feed, kept.listeners.contains(ObjectIdentifier(sink)) else { return nil }
            guard kept.listeners.count > 1 else {
                feeds[key] = nil
                return kept.token
            }
            feeds[key]?.listeners.remove(ObjectIdentifier(sink))
            return nil
        }
        if let unsubscribe { store.unsubscribe(id, token: unsubscribe) }
        feed.eventLoop.execute { feed.remove(sink) }
    }
}
