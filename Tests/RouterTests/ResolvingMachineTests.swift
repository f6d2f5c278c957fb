// The `play` and `queue` commands whose URLs are resolving (`ResolvingMachine`), without an
// engine: one at a time with plays first, the last choice winning, playlists, and the limits.
import EngineAPI
import ServiceSupport
import Testing

@testable import TonearmRouter

@Suite struct ResolvingMachineTests {
    func resolution(_ url: String, entries: [String] = []) -> Result<Resolution, APIError> {
        .success(
            Resolution(
                url: url, isPlaylist: !entries.isEmpty, entries: entries.map { TrackMetadata(url: $0) }))
    }

    /// One URL resolves at a time; a play goes before the queued URLs still waiting.
    @Test func oneResolvesAtATimeAndPlaysGoFirst() throws {
        var machine = ResolvingMachine()
        #expect(try machine.add("q1", isPlay: false, request: 1).get() == [.resolve(lookup: 1, url: "q1")])
        #expect(try machine.add("q2", isPlay: false, request: 2).get().isEmpty)
        _ = machine.choose()
        #expect(try machine.add("p", isPlay: true, request: 3).get().isEmpty)
        #expect(machine.pending.map(\.url) == ["q1", "p", "q2"])
        let (outcome, effects) = machine.resolved(1, resolution("q1"), room: 10, maxQueueLength: 10)
        #expect(effects == [.resolve(lookup: 3, url: "p")])
        guard case .queue(.enqueue(let tracks, let autoplay)) = outcome else {
            Issue.record("q1 is queued: \(outcome)")
            return
        }
        #expect(tracks.map(\.url) == ["q1"] && !autoplay, "a choice came after q1: it does not start by itself")
    }

    /// A command that chooses what plays calls off the plays still resolving (their callers are
    /// told `superseded`); a play resolved after a newer choice is superseded too.
    @Test func theLastChoiceWins() throws {
        var machine = ResolvingMachine()
        _ = machine.choose()
        _ = try machine.add("old", isPlay: true, request: 1).get()
        _ = try machine.add("queued", isPlay: false, request: 2).get()
        _ = try machine.add("older", isPlay: true, request: 3).get()
        let effects = machine.choose()
        #expect(
            effects == [
                .callOff(lookup: 1), .superseded(request: 1, url: "old"), .callOff(lookup: 3), .superseded(request: 3, url: "older"),
                .resolve(lookup: 2, url: "queued"),
            ])
        #expect(machine.pending.map(\.url) == ["queued"])
        // Called off, its resolution comes back to nothing.
        guard case .gone = machine.resolved(1, resolution("old"), room: 10, maxQueueLength: 10).0 else {
            Issue.record("a called-off play came back")
            return
        }
    }

    @Test func aSessionWaitsForAtMostThirtyTwoURLs() throws {
        var machine = ResolvingMachine()
        for n in 0..<Lookups.limit { _ = try machine.add("u\(n)", isPlay: false, request: UInt64(n)).get() }
        guard case .failure(let error) = machine.add("one more", isPlay: false, request: 99) else {
            Issue.record("a 33rd URL was taken")
            return
        }
        #expect(error.code == "too_many_pending" && error.retryAfterSeconds == 5)
    }

    /// A playlist's first track plays; the rest follow in the queue once it does, as room allows.
    @Test func aPlaylistPlaysItsFirstAndQueuesTheRest() throws {
        var machine = ResolvingMachine()
        _ = machine.choose()
        _ = try machine.add("list", isPlay: true, request: 7).get()
        let (outcome, _) = machine.resolved(1, resolution("list", entries: ["a", "b", "c", "d"]), room: 3, maxQueueLength: 10)
        guard case .queue(.playNow(let first)) = outcome else {
            Issue.record("the playlist's first track plays: \(outcome)")
            return
        }
        #expect(first.url == "a")
        #expect(machine.settle(1, succeeded: true) == .queueRest([Track(url: "b"), Track(url: "c")]))
        #expect(machine.settle(1, succeeded: true) == .done(url: "list", request: 7, answeredEarly: false))
    }

    /// A full queue refuses what was resolved; a caller answered early hears of a refusal with
    /// every client (the machine says it was answered early).
    @Test func aFullQueueRefusesAndACallerAnsweredEarlyIsSaidSo() throws {
        var machine = ResolvingMachine()
        _ = try machine.add("late", isPlay: false, request: 4).get()
        let waiting = machine.answerEarly(request: 4)
        let notWaiting = machine.answerEarly(request: 5)
        #expect(waiting && !notWaiting)
        guard case .failed(let error) = machine.resolved(1, resolution("late"), room: 0, maxQueueLength: 1_000).0 else {
            Issue.record("a full queue took a track")
            return
        }
        #expect(error.code == "queue_full")
        #expect(machine.settle(1, succeeded: false) == .done(url: "late", request: nil, answeredEarly: true))
        #expect(machine.isEmpty)
    }
}
