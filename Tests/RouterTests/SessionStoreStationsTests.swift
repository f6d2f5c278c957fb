// Stations in the session store (Sessions/SessionStore+Stations.swift): a follower's clients get
// the station's frames and events, one group per event loop and kind for the station and all its
// followers; a follower's own frames reach nobody; chains are refused; a follower that leaves,
// goes or switches stations is taken out of the station's groups at once.
import HTTPTypes
import NIOCore
import NIOEmbedded
import ServiceSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite struct SessionStoreStationsTests {
    typealias Tagged = BackoffTests.Tagged<BackoffTests.First>

    func send(_ store: SessionStore, _ id: SessionID, _ text: String) {
        store.route(.audio(AudioPacket(sessionID: id, payload: ByteBuffer(string: text))))
    }

    @Test func followersHearTheStationInTheStationsGroupsAndNotThemselves() async throws {
        let store = SessionStore()
        let (radio, one, two, other) = (try SessionID("radio"), try SessionID("one"), try SessionID("two"), try SessionID("other"))
        let (loopA, loopB) = (EmbeddedEventLoop(), EmbeddedEventLoop())
        let radioSink = Tagged(loopA), oneSink = Tagged(loopA), twoSink = Tagged(loopB), otherSink = Tagged(loopB)
        for (id, sink) in [(radio, radioSink), (one, oneSink), (two, twoSink), (other, otherSink)] {
            _ = store.subscribe(id, kind: .bot, sink: sink)
        }
        let twoStream = store.subscribe(two, kind: .listener)
        try store.follow(one, station: radio)
        try store.follow(two, station: radio)
        #expect(store.followerCount(radio) == 2 && store.station(of: one) == radio)
        #expect(store.findBySessionId(radio)?.fanLoops.count == 2, "one group per event loop for the station and its followers")

        send(store, radio, "r1")
        send(store, one, "own")  // a follower's own frame (its play stopping) reaches nobody
        send(store, other, "o1")
        for loop in [loopA, loopB] { loop.run() }
        #expect(radioSink.got == ["First:r1"] && oneSink.got == ["First:r1"] && twoSink.got == ["First:r1"])
        #expect(otherSink.got == ["First:o1"])
        var stream = twoStream.messages.makeAsyncIterator()
        let first = await stream.next()
        guard case .audio(let heard) = first else {
            Issue.record("no frame in the follower's stream: \(String(describing: first))")
            return
        }
        #expect(String(buffer: heard) == "r1")

        // Chains are refused, whichever end.
        #expect(throws: APIError.self) { try store.follow(radio, station: other) }
        #expect(throws: APIError.self) { try store.follow(other, station: one) }
        #expect(throws: APIError.self) { try store.follow(other, station: other) }
        #expect(store.station(of: radio) == nil && store.station(of: other) == nil)

        // One switches to another station, two goes: neither hears the first station after.
        try store.follow(one, station: other)
        store.release(two)
        #expect(store.followerCount(radio) == 0 && store.followerCount(other) == 1)
        send(store, radio, "r2")
        send(store, other, "o2")
        for loop in [loopA, loopB] { loop.run() }
        #expect(radioSink.got == ["First:r1", "First:r2"] && twoSink.got == ["First:r1"])
        #expect(oneSink.got == ["First:r1", "First:o2"] && otherSink.got == ["First:o1", "First:o2"])

        // Unfollowing: one hears itself again, and the station no longer reaches it.
        store.unfollow(one)
        send(store, one, "own2")
        send(store, other, "o3")
        for loop in [loopA, loopB] { loop.run() }
        #expect(oneSink.got == ["First:r1", "First:o2", "First:own2"])
        #expect(store.findBySessionId(other)?.fanLoops.isEmpty == true)
    }

    /// A follower's client that leaves is out of the station's groups from the next frame.
    @Test func aFollowersClientThatLeavesIsOutOfTheStationsGroups() throws {
        let store = SessionStore()
        let (radio, one) = (try SessionID("radio"), try SessionID("one"))
        let loop = EmbeddedEventLoop()
        let staying = Tagged(loop), leaving = Tagged(loop)
        try store.follow(one, station: radio)
        _ = store.subscribe(one, kind: .bot, sink: staying)
        let token = store.subscribe(one, kind: .bot, sink: leaving)
        send(store, radio, "1")
        store.unsubscribe(one, token: token)
        send(store, radio, "2")
        loop.run()
        #expect(staying.got == ["First:1", "First:2"] && leaving.got == ["First:1"])
    }

    /// In a cluster: a station relayed to another pair counts as followed there (it may not
    /// follow) until the relay leaves, and a station that follows is not relayed; a station
    /// another pair plays reaches its followers here from its relay, events and all, and its
    /// controller here is told nothing (it has none).
    @Test func relayedStationsCountAsFollowedAndReachTheirFollowers() async throws {
        let store = SessionStore()
        let (radio, one, other) = (try SessionID("radio"), try SessionID("one"), try SessionID("other"))
        #expect(store.joinRemoteFollowers(radio) == nil)
        #expect(throws: APIError.self) { try store.follow(radio, station: other) }
        store.leaveRemoteFollowers(radio)
        try store.follow(radio, station: other)
        #expect(store.joinRemoteFollowers(radio) == other, "a station that follows is not relayed")
        store.unfollow(radio)

        // What the station's pair said becomes the follow's answer: a station that follows is a
        // conflict, anything else the cluster's (a token refused: the pairs' secrets differ).
        let follows = StationRelays.refusal(4409, "station_follows: radio follows x itself; follow x instead", radio)
        #expect(follows.status == .conflict && follows.code == "station_follows" && follows.message == "radio follows x itself; follow x instead")
        let secret = StationRelays.refusal(4401, "unauthorized: the token is not valid", radio)
        #expect(secret.status == .serviceUnavailable && secret.code == "cluster_unavailable" && secret.message.contains("TONEARM_TOKEN_SECRET"))

        let (events, continuation) = AsyncStream<WireEvent>.makeStream()
        store.forwardEvents(to: continuation)
        let loop = EmbeddedEventLoop()
        let follower = Tagged(loop)
        try store.follow(one, station: radio)
        _ = store.subscribe(one, kind: .bot, sink: follower)
        let ready = WireEvent(type: .ready, sessionID: radio, playID: 7)
        store.relayStation(radio, .event(ready.jsonLine()), event: ready)
        store.relayStation(radio, .audio(ByteBuffer(string: "r1")), event: nil)
        loop.run()
        #expect(follower.got.count == 2 && follower.got.last == "First:r1", "\(follower.got)")
        #expect(store.hearing(of: radio)?.playID == 7, "what the station plays, for a relay that joins later")
        continuation.finish()
        var forwarded = 0
        for await _ in events { forwarded += 1 }
        #expect(forwarded == 0, "a relayed event reached a controller")
    }
}
