// A session's stream made once for many clients: a feed is the session store's one subscriber
// for them, builds what they get (an Ogg run for `/listen` listeners, a message of several frames
// for WebSocket clients that ask for it) and hands the same bytes to each on its event loop.
// The store still counts, lists and moves each client (`SessionStore.subscribe(_:kind:client:)`);
// the feed is neither counted nor listed. One feed per session and variant while it has clients.
import NIOCore
import Synchronization
import WireProtocol

/// What a feed is: a store subscriber that writes to clients of its own.
protocol SessionFeed: ClientSink {
    associatedtype Client: MovableClient
    /// What tells two feeds of one session apart (chained or not; frames per message).
    associatedtype Variant: Hashable & Sendable
    var variant: Variant { get }
    /// `client` gets what the feed writes from now on (called on the feed's `eventLoop`).
    func add(_ client: Client)
    /// Called on the feed's `eventLoop`; once or more.
    func remove(_ client: Client)
}

/// A feed's clients by event loop: one task per loop for each thing written.
struct FeedClients<Client: MovableClient> {
    private var loops: [(loop: any EventLoop, clients: [Client])] = []

    var count: Int { loops.reduce(0) { $0 + $1.clients.count } }

    mutating func add(_ client: Client) {
        if let index = loops.firstIndex(where: { $0.loop === client.eventLoop }) {
            loops[index].clients.append(client)
        } else {
            loops.append((client.eventLoop, [client]))
        }
    }

    mutating func remove(_ client: Client) {
        guard let index = loops.firstIndex(where: { $0.loop === client.eventLoop }) else { return }
        loops[index].clients.removeAll { $0 === client }
        if loops[index].clients.isEmpty { loops.remove(at: index) }
    }

    /// Calls `body` for each client on its loop: at once for those on `current` (the caller's
    /// loop), in one task per other loop.
    func forEach(on current: any EventLoop, _ body: @escaping @Sendable (Client) -> Void) {
        for (loop, clients) in loops {
            if loop === current {
                for client in clients { body(client) }
            } else {
                loop.execute { for client in clients { body(client) } }
            }
        }
    }
}

/// The Router's feeds of one kind: made and subscribed to the store for a session's first
/// client of a variant, unsubscribed when its last one leaves.
final class SessionFeeds<Feed: SessionFeed>: Sendable {
    private struct Key: Hashable {
        let id: SessionID
        let variant: Feed.Variant
    }

    private struct Kept {
        let feed: Feed
        /// The feed's subscription to the store.
        let token: UInt64
        var clients: Set<ObjectIdentifier>
    }

    private let store: SessionStore
    private let make: @Sendable (_ id: SessionID, _ variant: Feed.Variant, _ first: Feed.Client) -> Feed
    private let feeds = Mutex<[Key: Kept]>([:])

    /// `make` makes a session's feed for its first client (on that client's loop, say).
    init(store: SessionStore, make: @escaping @Sendable (SessionID, Feed.Variant, Feed.Client) -> Feed) {
        self.store = store
        self.make = make
    }

    /// Feeds with clients (tests and metrics read it).
    var count: Int { feeds.withLock { $0.count } }

    /// Gives `client` what `id`'s feed of `variant` writes from now on; call `detach` when it goes.
    /// The caller keeps the session pinned (`SessionDirectory.using`) while it attaches.
    func attach(_ client: Feed.Client, to id: SessionID, variant: Feed.Variant) -> Feed {
        let key = Key(id: id, variant: variant)
        let feed = feeds.withLock { feeds -> Feed in
            if let kept = feeds[key] {
                feeds[key]?.clients.insert(ObjectIdentifier(client))
                return kept.feed
            }
            let feed = make(id, variant, client)
            feeds[key] = Kept(feed: feed, token: store.subscribeFeed(id, sink: feed), clients: [ObjectIdentifier(client)])
            return feed
        }
        feed.eventLoop.execute { feed.add(client) }
        return feed
    }

    /// `client` gets nothing more from `feed`; the last client's going unsubscribes the feed.
    /// Once or more: a second call does nothing.
    func detach(_ client: Feed.Client, from feed: Feed, of id: SessionID) {
        let key = Key(id: id, variant: feed.variant)
        let unsubscribe = feeds.withLock { feeds -> UInt64? in
            guard let kept = feeds[key], kept.feed === feed, kept.clients.contains(ObjectIdentifier(client)) else { return nil }
            guard kept.clients.count > 1 else {
                feeds[key] = nil
                return kept.token
            }
            feeds[key]?.clients.remove(ObjectIdentifier(client))
            return nil
        }
        if let unsubscribe { store.unsubscribe(id, token: unsubscribe) }
        feed.eventLoop.execute { feed.remove(client) }
    }
}
