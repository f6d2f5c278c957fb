// The controller replays the old races with an engine whose answers the test releases by hand:
// resolves that finish late or out of order, a `ready` that beats the play's HTTP answer, an
// auto-advance racing a skip. The real engine is exercised in the end-to-end tests.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import NIOConcurrencyHelpers
import Synchronization
import Testing
import WireProtocol

@testable import TonearmRouter

/// An engine whose resolves wait until the test lets them go, and which records every call.
final class ScriptedEngine: EngineControl {
    private struct State {
        var calls: [String] = []
        var resolves: [String] = []
        var nexts: [String] = []
        var nextPlayID: UInt64 = 1
        var gates: [String: CheckedContinuation<Void, Never>] = [:]
        var heldURLs: Set<String> = []
        var refuse: Set<String> = []
        var active: [SessionID: UInt64]? = [:]
    }
    /// A pthread mutex (NIO's): the test's thread and the controller's contend for it, and
    /// ThreadSanitizer cannot see `Synchronization.Mutex`'s contended path.
    private let state = NIOLockedValueBox(State())

    /// Resolves of `url` wait for `release(url)`.
    func hold(_ url: String) { state.withLockedValue { _ = $0.heldURLs.insert(url) } }
    func refusePlays(of url: String) { state.withLockedValue { _ = $0.refuse.insert(url) } }
    /// What `activePlays()` answers; nil: the engine cannot be reached.
    func setActivePlays(_ plays: [SessionID: UInt64]?) { state.withLockedValue { $0.active = plays } }

    func handOver(_ id: SessionID, atMS: Int64) async throws(APIError) -> HandOverPoint {
        state.withLockedValue { $0.calls.append("handover at \(atMS)") }
        return HandOverPoint(sessionID: id, playID: 1, positionMS: 0, atMS: atMS)
    }

    func activePlays() async throws -> [SessionID: UInt64] {
        guard let plays = state.withLockedValue({ $0.active }) else { throw APIError.internalError }
        return plays
    }

    func release(_ url: String) {
        let gate = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            state.heldURLs.remove(url)
            return state.gates.removeValue(forKey: url)
        }
        gate?.resume()
    }

    var calls: [String] { state.withLockedValue { $0.calls } }
    var plays: [String] { calls.filter { $0.hasPrefix("play ") } }

    /// Waits until a resolve of `url` is parked.
    func waitUntilHeld(_ url: String) async {
        while state.withLockedValue({ $0.gates[url] == nil }) { try? await Task.sleep(for: .milliseconds(2)) }
    }

    func play(
        _ id: SessionID, url: String, startMS: Int64?, startAtMS: Int64?, volume: Int, filters: Filters, normalize: Bool,
        cue: Bool
    ) async throws(APIError) -> UInt64 {
        await gate("play:" + url)
        let playID = state.withLockedValue { state -> UInt64? in
            state.calls.append(
                "play \(url)" + (startMS.map { " from \($0)" } ?? "") + (startAtMS.map { " at \($0)" } ?? "")
                    + (filters.isEmpty ? "" : " " + SessionControl.filters(filters).description)
                    + (normalize ? "" : " unnormalized"))
            guard !state.refuse.contains(url) else { return nil }
            defer { state.nextPlayID += 1 }
            return state.nextPlayID
        }
        guard let playID else { throw APIError(status: .unprocessableContent, code: "source_not_found", message: "no such file") }
        return playID
    }

    /// What was asked to follow the current play, in order ("url crossfade" or "none").
    var nexts: [String] { state.withLockedValue { $0.nexts } }

    func next(_ id: SessionID, url: String?, crossfadeMS: Int) async throws(APIError) -> UInt64? {
        state.withLockedValue { state in
            state.nexts.append(url.map { "\($0) \(crossfadeMS)" } ?? "none")
            guard url != nil else { return nil }
            defer { state.nextPlayID += 1 }
            return state.nextPlayID
        }
    }

    func control(_ id: SessionID, _ control: SessionControl) async throws(APIError) {
        await gate("control:" + control.name)
        state.withLockedValue { $0.calls.append(control.description) }
    }

    /// Waits while `key` is held; a cancelled caller stops waiting (as a real request ends).
    private func gate(_ key: String) async {
        guard state.withLockedValue({ $0.heldURLs.contains(key) }) else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let parked = state.withLockedValue { state -> Bool in
                    guard !Task.isCancelled else { return false }
                    state.gates[key] = continuation
                    return true
                }
                if !parked { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.gates.removeValue(forKey: key) }?.resume()
        }
    }

    /// Whose resolves were asked for, in order ("url for owner").
    var resolves: [String] { state.withLockedValue { $0.resolves } }

    func resolve(_ url: String, owner: SessionID?) async throws(APIError) -> Resolution {
        state.withLockedValue { $0.resolves.append("\(url) for \(owner?.description ?? "nobody")") }
        await gate(url)
        if Task.isCancelled {
            state.withLockedValue { $0.calls.append("called off \(url)") }
            throw .cancelled
        }
        if url.hasPrefix("bad") {
            throw APIError(status: .unprocessableContent, code: "unresolvable", message: "cannot play \(url)")
        }
        if url.hasPrefix("list") {
            return Resolution(
                url: url, title: "A list", isPlaylist: true,
                entries: (1...3).map { TrackMetadata(url: "\(url)-\($0).mp3", title: "Entry \($0)") })
        }
        if url.hasPrefix("huge") {  // a page claiming 5,000 entries
            return Resolution(
                url: url, title: "A huge list", isPlaylist: true,
                entries: (1...5_000).map { TrackMetadata(url: "\(url)-\($0).mp3", title: "Entry \($0)") })
        }
        return Resolution(url: url, title: "Title of \(url)", durationMS: 30_000)
    }
}

@Suite struct SessionControllerTests {
    let id = try! SessionID("guild-1")

    /// The snapshots a controller asked to persist.
    final class Persisted: Sendable {
        private let snapshots = Mutex<[SessionSnapshot]>([])
        func append(_ snapshot: SessionSnapshot) { snapshots.withLock { $0.append(snapshot) } }
        var last: SessionSnapshot? { snapshots.withLock { $0.last } }
    }

    func controller(_ engine: ScriptedEngine, seed: UInt64 = 7) -> (SessionController, Persisted) {
        let persisted = Persisted()
        let sink = SessionSink(broadcast: { _, _ in }, persist: { _, snapshot in persisted.append(snapshot) })
        return (SessionController(id: id, engine: engine, sink: sink, shuffleSeed: { seed }), persisted)
    }

    func ready(_ playID: UInt64, title: String? = nil) -> WireEvent {
        WireEvent(type: .ready, sessionID: id, playID: playID, title: title, durationMS: 30_000, positionMS: 0)
    }

    func finished(_ playID: UInt64, _ reason: FinishReason) -> WireEvent {
        WireEvent(type: .finished, sessionID: id, playID: playID, reason: reason)
    }

    /// Hands `event` to the controller, which must leave an auto-advance, and runs it as the
    /// Router's upkeep does.
    func advance(_ controller: SessionController, after event: WireEvent) async throws {
        let pending = try #require(await controller.handle(event))
        await controller.advance(pending)
    }

    /// The engine is told what follows the current play whenever that changes; when it joins
    /// that play (its `ready`), the queue moves on without starting it again, and the previous
    /// play's `finished` changes nothing.
    @Test func theNextTrackIsAskedAheadAndAJoinAdvancesTheQueueWithoutAPlay() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        for url in ["a.mp3", "b.mp3", "c.mp3"] { try await controller.perform(.enqueue(url: url)) }
        #expect(engine.plays == ["play a.mp3"])
        #expect(engine.nexts.isEmpty, "the play's id is not known before its ready")
        try await advance(controller, after: ready(1))
        #expect(engine.nexts == ["b.mp3 0"])
        // The crossfade changes: asked again.
        try await controller.perform(.crossfade(milliseconds: 3_000))
        #expect(engine.nexts == ["b.mp3 0", "b.mp3 3000"])
        #expect(await controller.state.crossfadeMS == 3_000)
        await #expect(throws: APIError.self) { try await controller.perform(.crossfade(milliseconds: 12_001)) }
        // The engine joined play 3 (the last ask): b is current, and c is asked for after it.
        try await advance(controller, after: ready(3, title: "B"))
        var state = await controller.state
        #expect(state.current == 1 && state.nowPlaying?.url == "b.mp3" && state.status == "playing")
        #expect(await controller.activePlayID == 3)
        #expect(engine.nexts.last == "c.mp3 3000")
        #expect(engine.plays == ["play a.mp3"], "the joined track is not played again")
        // The faded-out play's finished is stale.
        #expect(await controller.handle(finished(1, .finished)) == nil)
        state = await controller.state
        #expect(state.current == 1 && state.status == "playing")
        // Removing the track that follows calls it off; looping the track asks for it again.
        try await controller.perform(.remove(index: 2))
        #expect(engine.nexts.last == "none")
        try await controller.perform(.loop(.track))
        #expect(engine.nexts.last == "b.mp3 3000")
        #expect(engine.plays == ["play a.mp3"])
    }

    @Test func doubleClickPlayPlaysOnlyTheLastClick() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        engine.hold("a.mp3")
        // The first click's resolve is slow; the second click is resolved first.
        let first = Task { try await controller.perform(.play(url: "a.mp3")) }
        await engine.waitUntilHeld("a.mp3")
        try await controller.perform(.play(url: "b.mp3"))
        engine.release("a.mp3")
        await #expect(throws: APIError.self) { try await first.value }
        #expect(engine.plays == ["play b.mp3"])
        let state = await controller.state
        #expect(state.nowPlaying?.url == "b.mp3")
        #expect(state.queue.map(\.url) == ["b.mp3"])
    }

    @Test func stopDuringResolveCancelsThePlay() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        engine.hold("slow.mp3")
        let play = Task { try await controller.perform(.play(url: "slow.mp3")) }
        await engine.waitUntilHeld("slow.mp3")
        try await controller.perform(.stop)
        engine.release("slow.mp3")
        let error = await #expect(throws: APIError.self) { try await play.value }
        #expect(error?.code == "superseded")
        #expect(engine.plays.isEmpty)
        #expect(await controller.state.status == "idle")
    }

    @Test func enqueueResolvedAfterTheUserMovedOnIsAddedButDoesNotStart() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        engine.hold("later.mp3")
        let add = Task { try await controller.perform(.enqueue(url: "later.mp3")) }
        await engine.waitUntilHeld("later.mp3")
        try await controller.perform(.stop)
        engine.release("later.mp3")
        let state = try await add.value
        #expect(state.queue.map(\.url) == ["later.mp3"])
        #expect(state.status == "idle")
        #expect(engine.plays.isEmpty)
    }

    @Test func readyBeforeThePlaysAnswerStillCounts() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        // The engine will answer play id 1; its `ready` arrives while the HTTP call is in flight.
        engine.hold("play:a.mp3")
        let play = Task { try await controller.perform(.play(url: "a.mp3")) }
        await engine.waitUntilHeld("play:a.mp3")
        await controller.handle(ready(1, title: "From the engine"))
        #expect(await controller.state.status == "starting")
        engine.release("play:a.mp3")
        try await play.value
        #expect(await controller.state.status == "playing")
    }

    @Test func autoAdvanceRacingASkipPlaysEachTrackOnce() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        // The track ends just as the user presses next: both advance from track 0, but only one
        // of them may win; the late `finished` of the skipped play must not advance again.
        try await controller.perform(.next)
        #expect(await controller.handle(finished(1, .replaced)) == nil)
        await controller.handle(ready(2))
        #expect(await controller.handle(finished(1, .finished)) == nil, "a stale finished must not advance")
        #expect(engine.plays == ["play list-1.mp3", "play list-2.mp3"])
        let state = await controller.state
        #expect(state.current == 1)
        #expect(state.status == "playing")
    }

    @Test func finishedAdvancesAndErrorMovesOnButStopsWhenEveryTrackFailed() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        try await advance(controller, after: finished(1, .finished))
        #expect(engine.plays.last == "play list-2.mp3")
        try await advance(controller, after: finished(2, .error))
        #expect(engine.plays.last == "play list-3.mp3")
        try await controller.perform(.loop(.queue))
        try await advance(controller, after: finished(3, .error))
        #expect(engine.plays.last == "play list-1.mp3")
        #expect(await controller.handle(finished(4, .error)) == nil)
        // list-2, list-3 and list-1 failed in a row: every track of the queue, so it gives up
        // (idle at once, with no further play) instead of going round the errors again.
        #expect(await controller.state.status == "idle")
        #expect(engine.plays == ["play list-1.mp3", "play list-2.mp3", "play list-3.mp3", "play list-1.mp3"])
    }

    @Test func previousAtTheFirstTrackRestartsIt() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        let state = try await controller.perform(.previous)
        #expect(state.current == 0)
        #expect(engine.plays == ["play list-1.mp3", "play list-1.mp3"])
    }

    @Test func anUnplayableURLIsRefusedAndTheQueueIsUntouched() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "a.mp3"))
        await controller.handle(ready(1))
        let error = await #expect(throws: APIError.self) { try await controller.perform(.play(url: "bad-url")) }
        #expect(error?.status == .unprocessableContent)
        let state = await controller.state
        #expect(state.queue.map(\.url) == ["a.mp3"])
        #expect(state.status == "playing")
    }

    @Test func anEngineRefusalLeavesTheSessionIdleNotPlaying() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        engine.refusePlays(of: "gone.mp3")
        await #expect(throws: APIError.self) { try await controller.perform(.play(url: "gone.mp3")) }
        #expect(await controller.state.status == "idle")
    }

    /// Under a timescale the track's time runs at speed × rate: the position the Router answers
    /// between `progress` events moves that fast (the seek bar agrees with what is heard).
    @Test func aTimescaleMovesThePositionAtItsRate() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        try await controller.perform(.filters(Filters(timescale: Timescale(speed: 1.5))))
        #expect(engine.calls.contains { $0.hasPrefix("filters") }, "\(engine.calls)")
        let started = ContinuousClock.now
        await controller.handle(WireEvent(type: .progress, sessionID: id, playID: 1, positionMS: 10_000))
        try await Task.sleep(for: .milliseconds(400))
        let moved = Double(await controller.state.positionMS - 10_000)
        let elapsed = ContinuousClock.now - started
        let most = 1.5 * (Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
        #expect(moved >= 600 && moved <= most + 1, "moved \(moved) ms; 400 ms at 1.5× is 600")
    }

    @Test func settingsAndPositionArePersistedAndResumeAfterARestart() async throws {
        let engine = ScriptedEngine()
        let (controller, persisted) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        try await controller.perform(.volume(40))
        try await controller.perform(.loop(.track))
        await controller.handle(WireEvent(type: .progress, sessionID: id, playID: 1, positionMS: 12_000))
        let last = try #require(persisted.last)
        #expect(last.volume == 40)
        #expect(last.queue.loop == .track)
        #expect(last.positionMS == 12_000)
        #expect(last.playID == 1)

        // A new controller from that snapshot; the engine lost the play (reconciliation ends it
        // the way `EngineReconciliation` does); resume starts where it was.
        let sink = SessionSink(broadcast: { _, _ in }, persist: { _, _ in })
        let again = SessionController(id: id, snapshot: last, engine: engine, sink: sink)
        await again.handle(
            WireEvent(type: .finished, sessionID: id, playID: 1, reason: .stopped, code: "engine_restarted", message: "lost"))
        #expect(await again.state.status == "idle")
        try await again.perform(.resume)
        #expect(engine.plays.last == "play list-1.mp3 from 12000")
        #expect(await again.state.volume == 40)
    }

    /// Filters set while idle wait for the next play; set while playing they reach the engine's
    /// play at once; they are kept, persisted and shown, and refused in words when they cannot be.
    @Test func filtersReachThePlayAndEveryLaterOne() async throws {
        let engine = ScriptedEngine()
        let (controller, persisted) = controller(engine)
        let boost = Filters(equalizer: [EqualizerBand(band: 8, gain: 0.25)])
        try await controller.perform(.filters(boost))
        #expect(engine.calls.isEmpty, "nothing plays: the filters wait for the next play")
        #expect(await controller.state.filters == boost)
        try await controller.perform(.play(url: "a.mp3"))
        #expect(engine.plays.last == "play a.mp3 filters equalizer=8:0.25")
        await controller.handle(ready(1))
        try await controller.perform(.filters(Filters()))
        #expect(engine.calls.last == "filters")
        #expect(persisted.last?.filters == Filters())
        try await controller.perform(.filters(boost))
        #expect(engine.calls.last == "filters equalizer=8:0.25")
        try await controller.perform(.play(url: "b.mp3"))
        #expect(engine.plays.last == "play b.mp3 filters equalizer=8:0.25")
        let refused = await #expect(throws: APIError.self) {
            try await controller.perform(.filters(Filters(equalizer: [EqualizerBand(band: 20, gain: 0)])))
        }
        #expect(refused?.code == "invalid_filters" && refused?.status == .badRequest)
        #expect(await controller.state.filters == boost)
        // Every filter set shows in the control's log line, not only the equalizer.
        try await controller.perform(.filters(Filters(equalizer: boost.equalizer, karaoke: Karaoke(), rotation: Rotation(rotationHz: 0.2))))
        #expect(engine.calls.last == "filters equalizer=8:0.25 filter=karaoke filter=rotation")
    }

    /// Normalisation is on for a new session; turned off it reaches the play in progress at once
    /// and every later play, and it is persisted.
    @Test func normalizationIsOnUntilTurnedOffAndStaysOff() async throws {
        let engine = ScriptedEngine()
        let (controller, persisted) = controller(engine)
        #expect(await controller.state.normalize)
        try await controller.perform(.play(url: "a.mp3"))
        #expect(engine.plays.last == "play a.mp3")
        await controller.handle(ready(1))
        try await controller.perform(.normalize(false))
        #expect(engine.calls.last == "normalize enabled=false")
        #expect(persisted.last?.normalize == false)
        #expect(await controller.state.normalize == false)
        try await controller.perform(.play(url: "b.mp3"))
        #expect(engine.plays.last == "play b.mp3 unnormalized")
    }

    @Test func pauseAndSeekNeedSomethingPlaying() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        let pause = await #expect(throws: APIError.self) { try await controller.perform(.pause) }
        #expect(pause?.status == .conflict)
        let seek = await #expect(throws: APIError.self) { try await controller.perform(.seek(positionMS: 1_000)) }
        #expect(seek?.status == .conflict)
        let volume = await #expect(throws: APIError.self) { try await controller.perform(.volume(5_000)) }
        #expect(volume?.status == .badRequest)
    }

    /// A playlist fills only the room left in the queue, and a full queue refuses more with a
    /// sentence instead of growing (and being persisted whole) without bound.
    @Test func queuesAndPlaylistsAreCapped() async throws {
        let engine = ScriptedEngine()
        let controller = SessionController(id: try SessionID("capped"), engine: engine, sink: SessionSink(broadcast: { _, _ in }, persist: { _, _ in }))
        var state = try await controller.perform(.play(url: "huge-a"))
        #expect(state.queue.count == SessionController.maxQueueLength)
        await #expect(throws: APIError.self) { try await controller.perform(.enqueue(url: "one.mp3")) }
        do {
            try await controller.perform(.enqueue(url: "one.mp3"))
        } catch {
            #expect(error.code == "queue_full" && error.status == .conflict && error.message.contains("1000"))
        }
        state = try await controller.perform(.remove(index: 999))
        state = try await controller.perform(.enqueue(url: "huge-b"))
        #expect(state.queue.count == SessionController.maxQueueLength)
        #expect(state.queue.last?.url == "huge-b-1.mp3", "the playlist filled the one free place")
    }

    /// A pause whose engine call is still out when the user skips: it was meant for the old
    /// track, so the engine is told which play (and refuses it for any other), and the new track
    /// is not marked paused when the answer comes back.
    @Test func aPauseOverTakenByASkipDoesNotPauseTheNextTrack() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        engine.hold("control:pause")
        let pause = Task { try await controller.perform(.pause) }
        await engine.waitUntilHeld("control:pause")
        try await controller.perform(.next)
        await controller.handle(ready(2))
        engine.release("control:pause")
        _ = try await pause.value
        #expect(engine.calls.contains("pause play_id=1"), "\(engine.calls)")
        let state = await controller.state
        #expect(state.status == "playing" && state.current == 1, "\(state.status) at \(state.current.map(String.init) ?? "-")")
    }

    @Test func aSeekOverTakenByASkipLeavesTheNewTrackWhereItIs() async throws {
        let engine = ScriptedEngine()
        let (controller, _) = controller(engine)
        try await controller.perform(.enqueue(url: "list"))
        await controller.handle(ready(1))
        engine.hold("control:seek")
        let seek = Task { try await controller.perform(.seek(positionMS: 20_000)) }
        await engine.waitUntilHeld("control:seek")
        try await controller.perform(.next)
        await controller.handle(ready(2))
        engine.release("control:seek")
        _ = try await seek.value
        #expect(engine.calls.contains("seek play_id=1 position_ms=20000"), "\(engine.calls)")
        #expect(await controller.state.positionMS < 5_000)
    }
}
