// One session as the Router runs it: the queue value, the settings that outlive a track (volume,
// loop), where the track is, and the map from the engine's play ids to queue generations. User
// commands and engine events arrive here; the queue decides, the controller carries it out.
//
// Races are settled by two counters. The queue's generation names the play the engine should be
// doing; an event of any other play is stale and dropped. The controller's `intent` counts the
// user's commands that choose what plays; a play whose URL was still resolving when a newer such
// command arrived is called off, so the last click wins whatever order the resolves finish in.
//
// A `play` or `queue` never holds its caller longer than `quickAnswer`: its URL is resolved by a
// job of its own (a `Lookup`, one at a time per session), and a caller still waiting then is
// answered with the URL under `resolving`; the outcome reaches every client as a `state`, or as
// an `error` event naming the URL.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import WireProtocol

actor SessionController {
    nonisolated let id: SessionID
    private var snapshot: SessionSnapshot
    /// When `snapshot.positionMS` was last true; the position moves on from there while playing.
    private var positionAt = ContinuousClock.now
    private var intent: UInt64 = 0
    /// Engine play id → queue generation, for plays this controller started.
    private var plays: [UInt64: UInt64] = [:]
    /// Plays requested from the engine whose play id has not come back yet.
    private var startsInFlight = 0
    /// Events of plays whose id is not known yet (the socket can beat the HTTP answer).
    private var unclaimed: [WireEvent] = []
    /// The play the engine was asked to open ahead to follow the current one.
    private struct AskedNext: Equatable {
        /// The play it follows.
        var after: UInt64
        var playID: UInt64
        var url: String
        var crossfadeMS: Int
    }
    private var askedNext: AskedNext?
    /// A next ask is on its way; asks are sent one at a time, so the engine gets them in order.
    private var asking = false
    /// Something changed while an ask was on its way: ask again once it is answered.
    private var askAgain = false
    /// Next asks sent whose answer has not come back yet.
    private var nextsInFlight = 0
    /// The last time a play was in progress or the state changed (for releasing stale sessions).
    private(set) var lastActive = ContinuousClock.now
    /// A `play` or `queue` command's URL on its way through the engine's `/resolve`.
    private struct Lookup: Sendable {
        let number: UInt64
        let url: String
        let isPlay: Bool
        /// The `intent` when the command came.
        let ticket: UInt64
        /// What the command's caller waits for, briefly.
        let outcome = Eventual<Result<Void, APIError>>()
        /// Fires when the lookup is called off: the engine's resolution ends with the request.
        let cancellation = CancellationSignal()
    }
    /// Waiting lookups, oldest first except that plays go before queued tracks; the first runs
    /// when `running` names it. One at a time: the engine lets a session hold one place for
    /// resolving, and the queue then grows in the order the commands came.
    private var lookups: [Lookup] = []
    private var running: UInt64?
    private var lookupsMade: UInt64 = 0
    /// Lookups whose caller was answered before they ended: their end is told to every client.
    private var answeredEarly: Set<UInt64> = []
    /// The longest a `play` or `queue` waits for its URL before answering with it under `resolving`.
    private let quickAnswer: Duration
    /// The most lookups a session may have waiting.
    static let maxLookups = 32
    private let engine: any EngineControl
    private let sink: SessionSink
    private let shuffleSeed: @Sendable () -> UInt64
    /// The most tracks a queue holds; a playlist fills what room is left.
    static let maxQueueLength = 1_000

    init(
        id: SessionID, snapshot: SessionSnapshot = SessionSnapshot(), engine: any EngineControl, sink: SessionSink,
        shuffleSeed: @escaping @Sendable () -> UInt64 = { UInt64.random(in: .min ... .max) },
        quickAnswer: Duration = .milliseconds(800)
    ) {
        self.quickAnswer = quickAnswer
        self.id = id
        self.snapshot = snapshot
        self.engine = engine
        self.sink = sink
        self.shuffleSeed = shuffleSeed
        if let playID = snapshot.playID { plays[playID] = snapshot.queue.generation }
    }

    /// The engine play this session believes is in progress.
    var activePlayID: UInt64? { snapshot.queue.status == .idle ? nil : snapshot.playID }

    /// Nothing plays and nothing is being resolved.
    var isIdle: Bool { snapshot.queue.status == .idle && lookups.isEmpty }

    var state: SessionView {
        let queue = snapshot.queue
        return SessionView(
            sessionID: id.description, status: "\(queue.status)", current: queue.current,
            nowPlaying: queue.currentTrack, queue: queue.tracks, positionMS: position,
            durationMS: queue.currentTrack?.durationMS, volume: snapshot.volume, filters: snapshot.filters,
            normalize: snapshot.normalize, crossfadeMS: snapshot.crossfadeMS,
            paused: queue.status == .paused, loop: queue.loop,
            resolving: lookups.map { PendingTrack(url: $0.url, command: $0.isPlay ? "play" : "queue") })
    }

    /// Runs `join` on the controller with the current state, so no state change falls between
    /// the state a client gets first and its subscription (every change is broadcast from here).
    func withCurrentState<T: Sendable>(_ join: @Sendable (SessionView) -> T) -> T { join(state) }

    /// The furthest seek accepted: the engine's bound on positions (2^40 ms, about 35 years).
    static let maxPositionMS: Int64 = 1 << 40

    /// How many more tracks the queue takes; 409 `queue_full` when none.
    private func roomInQueue(_ url: String) throws(APIError) -> Int {
        let room = Self.maxQueueLength - snapshot.queue.tracks.count
        guard room > 0 else {
            throw APIError(
                status: .conflict, code: "queue_full",
                message: "the queue holds \(Self.maxQueueLength) tracks, the most it may; remove some before adding \(url)")
        }
        return room
    }

    /// Where the current track is now, in ms of the track (which a timescale makes run faster or
    /// slower than the clock).
    var position: Int64 {
        guard snapshot.queue.status == .playing else { return snapshot.positionMS }
        let elapsed = ContinuousClock.now - positionAt
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        let moved = Int64(min(milliseconds * snapshot.filters.sourceRate, 1e15))
        let position = snapshot.positionMS + moved
        return snapshot.queue.currentTrack?.durationMS.map { min(position, $0) } ?? position
    }

    // MARK: Commands

    /// Carries out a command and answers the state after it.
    @discardableResult
    func perform(_ command: SessionCommand) async throws(APIError) -> SessionView {
        lastActive = .now
        switch command {
        case .play(let url):
            try await resolve(url, isPlay: true, ticket: newIntent())
        case .enqueue(let url):
            try await resolve(url, isPlay: false, ticket: intent)
        case .remove(let index):
            if index == snapshot.queue.current { newIntent() }
            try await apply(.remove(index: index))
        case .clear:
            newIntent()
            callOff { _ in true }
            try await apply(.clear)
        case .jump(let index):
            newIntent()
            try await apply(.jump(index: index))
        case .next:
            newIntent()
            try await apply(.next)
        case .previous:
            newIntent()
            try await apply(.previous(positionMS: position))
        case .stop:
            newIntent()
            try await apply(.stop)
        case .pause:
            try await apply(.pause)
        case .resume:
            try await apply(.resume)
        case .seek(let target):
            guard (0...Self.maxPositionMS).contains(target) else {
                throw .badRequest("invalid_position", "position_ms must be from 0 to \(Self.maxPositionMS)")
            }
            guard snapshot.queue.status == .playing || snapshot.queue.status == .paused else {
                throw APIError(status: .conflict, code: "invalid_state", message: "nothing is playing to seek in")
            }
            let generation = snapshot.queue.generation
            try await engine.control(id, .seek(positionMS: target, playID: snapshot.playID))
            // Another command may have replaced the track meanwhile; the seek was for the old one.
            guard snapshot.queue.generation == generation else { break }
            setPosition(target)
            changed()
        case .volume(let volume):
            guard (0...1000).contains(volume) else {
                throw .badRequest("invalid_volume", "volume is a percentage from 0 to 1000 (100 = unchanged)")
            }
            if snapshot.queue.status != .idle { try await engine.control(id, .volume(volume)) }
            snapshot.volume = volume
            changed()
        case .filters(let filters):
            if let problem = filters.problem { throw .badRequest("invalid_filters", problem) }
            if snapshot.queue.status != .idle { try await engine.control(id, .filters(filters)) }
            // The track's time runs at the new rate from here.
            if filters.sourceRate != snapshot.filters.sourceRate { setPosition(position) }
            snapshot.filters = filters
            changed()
        case .normalize(let enabled):
            if snapshot.queue.status != .idle { try await engine.control(id, .normalize(enabled)) }
            snapshot.normalize = enabled
            changed()
        case .crossfade(let milliseconds):
            guard (0...NextRequest.maxCrossfadeMS).contains(milliseconds) else {
                throw .badRequest(
                    "invalid_crossfade", "crossfade_ms is from 0 (gapless) to \(NextRequest.maxCrossfadeMS) ms")
            }
            snapshot.crossfadeMS = milliseconds
            changed()
        case .loop(let mode):
            try await apply(.setLoop(mode))
        case .shuffle:
            try await apply(.shuffle(seed: shuffleSeed()))
        }
        await askForNext()
        return state
    }

    // MARK: URLs resolving in the background

    /// A command that chooses what plays: plays still resolving are called off (their place at
    /// the engine freed), since they would be dropped when they came back.
    @discardableResult
    private func newIntent() -> UInt64 {
        intent += 1
        callOff { $0.isPlay }
        return intent
    }

    /// Resolves `url` for a `play` or `queue` command, then carries the command out; answers
    /// after at most `quickAnswer`, with the URL under `resolving` if it is not done by then.
    private func resolve(_ url: String, isPlay: Bool, ticket: UInt64) async throws(APIError) {
        guard lookups.count < Self.maxLookups else {
            throw APIError(
                status: .tooManyRequests, code: "too_many_pending",
                message: "\(lookups.count) URLs of this session are still being resolved, the most it may have; "
                    + "wait for them before adding \(url)", retryAfterSeconds: 5)
        }
        lookupsMade += 1
        let lookup = Lookup(number: lookupsMade, url: url, isPlay: isPlay, ticket: ticket)
        // A play goes before the queued tracks still waiting (not before the one resolving now).
        let first = running == nil ? 0 : 1
        if isPlay, let index = lookups.indices.dropFirst(first).first(where: { !lookups[$0].isPlay }) {
            lookups.insert(lookup, at: index)
        } else {
            lookups.append(lookup)
        }
        startNextLookup()
        let result = await lookup.outcome.value(within: quickAnswer) ?? lookup.outcome.value
        guard let result else {
            // Still resolving: the caller has its answer; the end goes to every client.
            answeredEarly.insert(lookup.number)
            changed()
            return
        }
        try result.get()
    }

    /// Starts resolving the first waiting lookup, unless one is being resolved.
    private func startNextLookup() {
        guard running == nil, let next = lookups.first else { return }
        running = next.number
        sink.spawn(next.cancellation) { [engine, id] in
            let resolution: Result<Resolution, APIError>
            do throws(APIError) {
                resolution = .success(try await engine.resolve(next.url, owner: id))
            } catch {
                resolution = .failure(error)
            }
            await self.resolved(next.number, resolution)
        }
    }

    /// The engine answered lookup `number`: its command is carried out (or refused), and the next
    /// lookup starts.
    private func resolved(_ number: UInt64, _ resolution: Result<Resolution, APIError>) async {
        // Called off meanwhile: its outcome is decided already.
        guard running == number, let index = lookups.firstIndex(where: { $0.number == number }) else { return }
        let lookup = lookups.remove(at: index)
        running = nil
        startNextLookup()
        let outcome: Result<Void, APIError>
        do throws(APIError) {
            try await carryOut(lookup, resolution.get().tracks)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        lookup.outcome.set(outcome)
        if answeredEarly.remove(number) != nil, case .failure(let error) = outcome {
            sink.broadcast(id, ErrorEvent(sessionID: id.description, code: error.code, message: error.message, url: lookup.url).json())
            changed()
        }
        await askForNext()
    }

    /// A resolved `play` or `queue` command, carried out.
    private func carryOut(_ lookup: Lookup, _ tracks: [Track]) async throws(APIError) {
        let room = try roomInQueue(lookup.url)
        guard lookup.isPlay else {
            try await apply(.enqueue(Array(tracks.prefix(room)), autoplay: lookup.ticket == intent))
            return
        }
        guard lookup.ticket == intent, let first = tracks.first else { throw Self.superseded(lookup.url) }
        try await apply(.playNow(first))
        if tracks.count > 1 && room > 1 {
            try await apply(.enqueue(Array(tracks.dropFirst().prefix(room - 1)), autoplay: false))
        }
    }

    /// Calls off the lookups `which` picks: their resolution is cancelled (the engine frees its
    /// place at once) and a caller still waiting is told `superseded`.
    private func callOff(_ which: (Lookup) -> Bool) {
        let gone = lookups.filter(which)
        guard !gone.isEmpty else { return }
        lookups.removeAll(where: which)
        var told = false
        for lookup in gone {
            lookup.outcome.set(.failure(Self.superseded(lookup.url)))
            lookup.cancellation.fire()
            if running == lookup.number { running = nil }
            if answeredEarly.remove(lookup.number) != nil { told = true }
        }
        startNextLookup()
        if told { changed() }
    }

    private static func superseded(_ url: String) -> APIError {
        APIError(
            status: .conflict, code: "superseded",
            message: "another command changed what plays while \(url) was being resolved; it was not played")
    }

    // MARK: The next track, opened ahead

    /// Tells the engine which track follows the current play, whenever that changes (a track
    /// added, removed or moved, the loop mode, a skip, a new play, the crossfade): it opens it
    /// ahead and joins it on the sample or over the crossfade. Nothing follows when the queue
    /// would stop. A refusal only costs the join: the queue then starts the track as a new play.
    private func askForNext() async {
        if asking {
            askAgain = true
            return
        }
        asking = true
        defer { asking = false }
        repeat {
            askAgain = false
            await askOnce()
        } while askAgain
    }

    private func askOnce() async {
        guard let playID = snapshot.playID, snapshot.queue.status == .playing || snapshot.queue.status == .paused else {
            return
        }
        let wanted = snapshot.queue.upcoming
        if let asked = askedNext, asked.after == playID, asked.url == wanted?.url, asked.crossfadeMS == snapshot.crossfadeMS {
            return
        }
        if wanted == nil && askedNext?.after != playID { return }
        let crossfade = snapshot.crossfadeMS
        nextsInFlight += 1
        defer { nextsInFlight -= 1 }
        let nextID: UInt64?
        do {
            nextID = try await engine.next(id, url: wanted?.url, crossfadeMS: crossfade)
        } catch {
            askedNext = nil
            return
        }
        askedNext = nil
        guard let nextID, let url = wanted?.url else { return }
        askedNext = AskedNext(after: playID, playID: nextID, url: url, crossfadeMS: crossfade)
        // A join that beat the answer.
        if let advance = claimEarlyEvents(of: nextID) { await self.advance(advance) }
    }

    /// The engine joined the play it was asked to open ahead: the queue moves on as if the
    /// current track had ended, onto that play, without asking for it again.
    private func joined(_ asked: AskedNext, _ event: WireEvent) -> PendingPlay? {
        askedNext = nil
        let action = step(.finished(generation: snapshot.queue.generation, reason: .finished))
        guard case .play(let track, let generation, _) = action, track.url == asked.url else {
            // The queue wanted something else meanwhile: it starts that, which ends the joined play.
            if case .play = action { return PendingPlay(action: action) }
            if action != .none { changed() }
            return nil
        }
        plays[asked.playID] = generation
        snapshot.playID = asked.playID
        setPosition(event.positionMS ?? 0)
        lastActive = .now
        _ = step(.ready(generation: generation, title: event.title, durationMS: event.durationMS))
        changed()
        return PendingPlay(action: nil)
    }

    // MARK: Running the queue's actions

    /// What carrying out one action leaves to do.
    private enum Outcome {
        case done
        /// The engine answered; the queue takes the answer as its next input.
        case next(SessionQueue.Input)
        /// An action of its own (an early `finished` that advances the queue).
        case then(SessionQueue.Action)
        /// The engine (or the queue) refused: the queue takes `next`, if any, then the caller gets `error`.
        case failed(APIError, next: SessionQueue.Input?)
    }

    /// Hands `input` to the queue and carries out the actions that follow.
    private func apply(_ input: SessionQueue.Input) async throws(APIError) {
        try await run(step(input))
    }

    /// Carries out `first`, then each action the engine's answers lead the queue to, until none
    /// is left. Nothing here decides: the queue does, this only does what it says.
    private func run(_ first: SessionQueue.Action) async throws(APIError) {
        var action = first
        while true {
            switch await carryOut(action) {
            case .done:
                return
            case .next(let input):
                action = step(input)
            case .then(let next):
                action = next
            case .failed(let error, let next):
                if let next { try? await run(step(next)) }
                throw error
            }
        }
    }

    /// The queue's answer to `input`; the position clock stops and starts with its status.
    private func step(_ input: SessionQueue.Input) -> SessionQueue.Action {
        let now = position
        let wasPlaying = snapshot.queue.status == .playing
        let action = snapshot.queue.handle(input)
        if wasPlaying != (snapshot.queue.status == .playing) { setPosition(now) }
        return action
    }

    /// Does one action's I/O and says what follows from the answer.
    private func carryOut(_ action: SessionQueue.Action) async -> Outcome {
        switch action {
        case .play(let track, let generation, let resuming):
            let startMS = resuming ? snapshot.positionMS : nil
            snapshot.playID = nil
            setPosition(startMS ?? 0)
            changed()
            startsInFlight += 1
            defer { startsInFlight -= 1 }
            let playID: UInt64
            do {
                playID = try await engine.play(
                    id, url: track.url, startMS: startMS, volume: snapshot.volume, filters: snapshot.filters,
                    normalize: snapshot.normalize)
            } catch {
                // The engine refused: nothing plays now. Stop here rather than try every track.
                return .failed(error, next: .finished(generation: generation, reason: .other))
            }
            plays[playID] = generation
            if snapshot.queue.generation == generation { snapshot.playID = playID }
            // Events that beat the answer; the last of them may have ended the play already.
            let advance = claimEarlyEvents(of: playID)
            changed()
            return advance?.action.map { .then($0) } ?? .done
        case .stop:
            snapshot.playID = nil
            changed()
            do {
                try await engine.control(id, .stop)
            } catch {
                return .failed(error, next: nil)
            }
            return .done
        case .pause(let generation), .resume(let generation):
            let pausing = action == .pause(generation: generation)
            // Named by play id, the engine refuses it if that play has been replaced meanwhile.
            do {
                try await engine.control(
                    id, pausing ? .pause(playID: snapshot.playID) : .resume(playID: snapshot.playID))
            } catch {
                return .failed(error, next: nil)
            }
            return .next(pausing ? .paused(generation: generation) : .resumed(generation: generation))
        case .updated:
            changed()
            return .done
        case .none:
            return .done
        case .refuse(let refusal):
            return .failed(Self.error(refusal), next: nil)
        }
    }

    // MARK: Engine events

    /// An auto-advance an event left to start: its HTTP call runs in a task of its own
    /// (`advance`), so it never holds up the events behind it.
    struct PendingPlay: Sendable {
        /// nil: nothing to start, but the track after the new current one is to be asked for.
        fileprivate let action: SessionQueue.Action?
    }

    /// An event of this session from the engine (in socket order). Returns the play it leaves to
    /// start, if any.
    @discardableResult
    func handle(_ event: WireEvent) -> PendingPlay? {
        guard let playID = event.playID else { return nil }
        if event.type == .ready, let asked = askedNext, asked.playID == playID, asked.after == snapshot.playID {
            return joined(asked, event)
        }
        guard let generation = plays[playID] else {
            // Possibly a play whose id is still on its way back over HTTP.
            if startsInFlight + nextsInFlight > 0 && unclaimed.count < 64 { unclaimed.append(event) }
            return nil
        }
        let current = generation == snapshot.queue.generation
        switch event.type {
        case .ready:
            if current {
                setPosition(event.positionMS ?? snapshot.positionMS)
                lastActive = .now
            }
            if step(.ready(generation: generation, title: event.title, durationMS: event.durationMS)) != .none {
                changed()
            }
            // The play's id is known and it plays: the track after it can be opened ahead.
            if current { return PendingPlay(action: nil) }
        case .finished:
            plays.removeValue(forKey: playID)
            let reason: SessionQueue.EndReason =
                switch event.reason {
                case .finished: .finished
                case .error: .error
                default: .other
                }
            guard current else { return nil }
            lastActive = .now
            snapshot.playID = nil
            let action = step(.finished(generation: generation, reason: reason))
            if case .play = action { return PendingPlay(action: action) }
            if action != .none { changed() }
        case .progress, .seeked:
            guard current, let position = event.positionMS else { return nil }
            setPosition(position)
            if event.type == .seeked { changed() } else { persistOnly() }
        case .paused, .resumed:
            guard current else { return nil }
            if let position = event.positionMS { setPosition(position) }
        case .volume:
            if let volume = event.volume, current { snapshot.volume = volume }
        default:
            break
        }
        return nil
    }

    /// Handles the events of `playID` that arrived before its id came back over HTTP; returns
    /// the play the last of them leaves to start, if any.
    private func claimEarlyEvents(of playID: UInt64) -> PendingPlay? {
        let early = unclaimed.filter { $0.playID == playID }
        unclaimed.removeAll { $0.playID == playID }
        var advance: PendingPlay?
        for event in early { advance = handle(event) ?? advance }
        return advance
    }

    /// Starts the next track after an auto-advance; a refusal tells the clients.
    func advance(_ pending: PendingPlay) async {
        do {
            if let action = pending.action { try await run(action) }
        } catch {
            sink.broadcast(id, ErrorEvent(sessionID: id.description, code: error.code, message: error.message).json())
        }
        await askForNext()
    }

    // MARK: Helpers

    private func setPosition(_ position: Int64) {
        snapshot.positionMS = position
        positionAt = .now
    }

    private func changed() {
        sink.broadcast(id, state.json())
        sink.persist(id, snapshot)
    }

    private func persistOnly() {
        sink.persist(id, snapshot)
    }

    private static func error(_ refusal: SessionQueue.Refusal) -> APIError {
        switch refusal {
        // Well formed, but the queue has no such position (now): a conflict with its state.
        case .badIndex(let message): APIError(status: .conflict, code: "invalid_index", message: message)
        case .invalidState(let message): APIError(status: .conflict, code: "invalid_state", message: message)
        }
    }
}
