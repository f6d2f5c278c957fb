import Foundation
import Testing

@testable import TonearmRouter

@Suite struct SessionQueueTests {
    let a = Track(url: "a.mp3"), b = Track(url: "b.mp3"), c = Track(url: "c.mp3")

    func queue(_ tracks: [Track], playing index: Int? = 0) -> SessionQueue {
        var q = SessionQueue()
        _ = q.handle(.enqueue(tracks))
        if let index, index != 0 { _ = q.handle(.jump(index: index)) }
        _ = q.handle(.ready(generation: q.generation))
        return q
    }

    @Test func enqueueOnAnIdleQueueStartsPlaying() {
        var q = SessionQueue()
        #expect(q.handle(.enqueue([a, b])) == .play(a, generation: 1))
        #expect(q.handle(.enqueue([c])) == .updated)
        #expect(q.tracks == [a, b, c])
        #expect(q.handle(.ready(generation: 1)) == .updated)
        #expect(q.status == .playing)
    }

    @Test func autoAdvanceOnlyOnFinished() {
        var q = queue([a, b, c])
        #expect(q.handle(.finished(generation: 1, reason: .finished)) == .play(b, generation: 2))
        _ = q.handle(.ready(generation: 2))
        #expect(q.handle(.finished(generation: 2, reason: .other)) == .updated)
        #expect(q.status == .idle)
        #expect(q.current == 1)
    }

    @Test func anErrorMovesOnSoOneBadTrackDoesNotStallTheQueue() {
        var q = queue([a, b])
        #expect(q.handle(.finished(generation: 1, reason: .error)) == .play(b, generation: 2))
        var looping = queue([a, b])
        _ = looping.handle(.setLoop(.track))
        // A failing track is not repeated even in track loop.
        #expect(looping.handle(.finished(generation: looping.generation, reason: .error)) == .play(b, generation: 2))
    }

    @Test func loopModes() {
        var track = queue([a, b])
        _ = track.handle(.setLoop(.track))
        #expect(track.handle(.finished(generation: 1, reason: .finished)) == .play(a, generation: 2))
        var wrap = queue([a, b], playing: 1)
        _ = wrap.handle(.setLoop(.queue))
        #expect(wrap.handle(.finished(generation: wrap.generation, reason: .finished)) == .play(a, generation: wrap.generation))
        var end = queue([a, b], playing: 1)
        #expect(end.handle(.finished(generation: end.generation, reason: .finished)) == .updated)
        #expect(end.status == .idle)
    }

    // MARK: The races of the previous router, replayed

    @Test func doubleClickPlayPlaysTheSecondAndIgnoresTheFirstsResults() {
        var q = SessionQueue()
        #expect(q.handle(.playNow(a)) == .play(a, generation: 1))
        #expect(q.handle(.playNow(b)) == .play(b, generation: 2))
        // The first play's ready and finished (replaced) arrive late: dropped.
        #expect(q.handle(.ready(generation: 1)) == .none)
        #expect(q.handle(.finished(generation: 1, reason: .other)) == .none)
        #expect(q.status == .starting)
        #expect(q.handle(.ready(generation: 2)) == .updated)
        #expect(q.currentTrack == b)
    }

    @Test func skipDuringAutoAdvanceDoesNotAdvanceTwice() {
        var q = queue([a, b, c])
        // The user skips a; the engine's `finished` of a (replaced by the skip) arrives after.
        #expect(q.handle(.next) == .play(b, generation: 2))
        #expect(q.handle(.finished(generation: 1, reason: .finished)) == .none)
        #expect(q.currentTrack == b)
        // And the other order: a finishes naturally, auto-advance to b, then b's late-from-a
        // stale finished is ignored.
        var r = queue([a, b, c])
        #expect(r.handle(.finished(generation: 1, reason: .finished)) == .play(b, generation: 2))
        #expect(r.handle(.finished(generation: 1, reason: .finished)) == .none)
        #expect(r.currentTrack == b)
    }

    @Test func stopDuringResolveDropsTheResolvedPlay() {
        var q = SessionQueue()
        let play = q.handle(.playNow(a))
        guard case .play(_, let generation, _) = play else { Issue.record("no play"); return }
        #expect(q.handle(.stop) == .stop)
        // The resolve finishes and the engine reports ready for the stopped generation.
        #expect(q.handle(.ready(generation: generation)) == .none)
        #expect(q.status == .idle)
    }

    @Test func playNowDuringASlowResolveWins() {
        var q = queue([a])
        guard case .play(_, let slow, _) = q.handle(.playNow(b)) else { Issue.record("no play"); return }
        guard case .play(_, let fast, _) = q.handle(.playNow(c)) else { Issue.record("no play"); return }
        #expect(slow < fast)
        #expect(q.handle(.ready(generation: slow)) == .none)
        #expect(q.handle(.finished(generation: slow, reason: .error)) == .none)
        #expect(q.handle(.ready(generation: fast)) == .updated)
        #expect(q.currentTrack == c)
    }

    @Test func previousAtTheFirstTrackRestartsItAndPastThreeSecondsRestartsAnyTrack() {
        var q = queue([a, b])
        #expect(q.handle(.previous(positionMS: 500)) == .play(a, generation: 2))
        _ = q.handle(.jump(index: 1))
        #expect(q.handle(.previous(positionMS: 4_000)) == .play(b, generation: 4))
        #expect(q.handle(.previous(positionMS: 1_000)) == .play(a, generation: 5))
        _ = q.handle(.setLoop(.queue))
        #expect(q.handle(.previous(positionMS: 0)) == .play(b, generation: 6))
        var empty = SessionQueue()
        #expect(empty.handle(.previous(positionMS: 0)) == .refuse(.invalidState("nothing is playing")))
    }

    // MARK: Editing

    @Test func removingKeepsTheCurrentTrackPlaying() {
        var q = queue([a, b, c], playing: 1)
        let generation = q.generation
        #expect(q.handle(.remove(index: 0)) == .updated)
        #expect(q.currentTrack == b)
        #expect(q.current == 0)
        #expect(q.generation == generation)
        #expect(q.handle(.remove(index: 5)) == .refuse(.badIndex("index 5 does not exist: the queue has positions 0 to 1")))
    }

    @Test func removingTheCurrentTrackPlaysTheNextOrStops() {
        var q = queue([a, b])
        #expect(q.handle(.remove(index: 0)) == .play(b, generation: 2))
        _ = q.handle(.ready(generation: 2))
        #expect(q.handle(.remove(index: 0)) == .stop)
        #expect(q.tracks.isEmpty)
        #expect(q.current == nil)
    }

    @Test func clearStopsAndEmpties() {
        var q = queue([a, b])
        #expect(q.handle(.clear) == .stop)
        #expect(q.tracks.isEmpty && q.current == nil && q.status == .idle)
        #expect(q.handle(.jump(index: 0)) == .refuse(.badIndex("index 0 does not exist: the queue is empty")))
    }

    @Test func pauseAndResumeChangeTheQueueOnlyOnceTheEngineHasDoneThem() {
        var q = queue([a])
        #expect(q.handle(.resume) == .refuse(.invalidState("already playing")))
        #expect(q.handle(.pause) == .pause(generation: 1))
        #expect(q.status == .playing)  // asked, not done
        #expect(q.handle(.paused(generation: 1)) == .updated)
        #expect(q.status == .paused)
        #expect(q.handle(.pause) == .refuse(.invalidState("already paused")))
        #expect(q.handle(.resume) == .resume(generation: 1))
        #expect(q.handle(.resumed(generation: 1)) == .updated)
        #expect(q.status == .playing)
        var idle = SessionQueue()
        #expect(idle.handle(.pause) == .refuse(.invalidState("nothing is playing")))
    }

    @Test func anEngineAnswerForAReplacedPlayChangesNothing() {
        var q = queue([a, b])
        #expect(q.handle(.pause) == .pause(generation: 1))
        // The user skipped while the engine was pausing the old track.
        #expect(q.handle(.next) == .play(b, generation: 2))
        #expect(q.handle(.paused(generation: 1)) == .none)
        #expect(q.status == .starting)
        _ = q.handle(.ready(generation: 2))
        #expect(q.handle(.resumed(generation: 1)) == .none)
        #expect(q.status == .playing)
    }

    @Test func resumeAfterAStopPlaysTheTrackAgainFromWhereItWas() {
        var q = queue([a])
        #expect(q.handle(.stop) == .stop)
        #expect(q.handle(.resume) == .play(a, generation: 3, resuming: true))
    }

    @Test func shuffleMovesOnlyWhatIsAheadAndIsRepeatableBySeed() {
        let many = (0..<20).map { Track(url: "t\($0).mp3") }
        var q = queue(many, playing: 4)
        #expect(q.handle(.shuffle(seed: 7)) == .updated)
        #expect(Array(q.tracks[0...4]) == Array(many[0...4]))
        #expect(Set(q.tracks.map(\.url)) == Set(many.map(\.url)))
        #expect(Array(q.tracks[5...]) != Array(many[5...]))
        var again = queue(many, playing: 4)
        _ = again.handle(.shuffle(seed: 7))
        #expect(again.tracks == q.tracks)
        #expect(q.currentTrack == many[4])
    }

    @Test func theQueueRoundTripsThroughCodable() throws {
        var q = queue([a, b], playing: 1)
        _ = q.handle(.setLoop(.queue))
        let data = try JSONEncoder().encode(q)
        #expect(try JSONDecoder().decode(SessionQueue.self, from: data) == q)
    }
}

import Foundation

@Suite struct SessionQueueStorageTests {
    /// Stored queues keep the key they were first saved with (`playback`), so a Router upgraded
    /// over an old database still loads every queue.
    @Test func aQueueStoredUnderItsFirstKeysStillLoads() throws {
        let stored = #"{"tracks":[{"url":"a.mp3","title":"A"}],"current":0,"loop":"off","generation":3,"playback":{"paused":{}},"failuresInARow":0}"#
        let queue = try JSONDecoder().decode(SessionQueue.self, from: Data(stored.utf8))
        #expect(queue.status == .paused)
        #expect(queue.generation == 3)
        #expect(queue.currentTrack?.title == "A")
        let again = try JSONSerialization.jsonObject(with: JSONEncoder().encode(queue)) as? [String: Any]
        #expect(again?["playback"] != nil)
    }
}
