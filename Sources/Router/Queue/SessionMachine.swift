// Every decision about one session the Router runs, as a value: what a command, an engine event,
// an engine's answer or a resolved URL leads to. Inputs in, actions out; nothing here waits, reads
// a clock or does I/O (the time comes with each input). `SessionController` carries the actions
// out and hands the engine's answers back as inputs; `SessionQueue` decides what plays.
//
// Races are settled by two counters. The queue's generation names the play the engine should be
// doing; an event of any other play is stale and dropped. `intent` counts the commands that choose
// what plays; a play whose URL was still resolving when a newer such command came is called off,
// so the last click wins whatever order the resolves finish in.
//
// An engine call carries its `Origin`: the request whose caller waits for it (answered by
// `.finish` once its work, and the ask for the next track it leads to, is done), a URL resolved
// for a `play` or `queue` (`Lookups`), an auto-advance, or the ask loop (`NextAsk`).
//
// Every decision of a session is in this file, in three parts: what it is (the state and the
// view clients get), the commands and the URLs they resolve, and the engine (its calls, answers
// and events, and the track that follows).
import EngineAPI
import HTTPTypes
import ServiceSupport
import WireProtocol

struct SessionMachine: Sendable {
    enum Input: Sendable {
        case command(SessionCommand, request: UInt64, shuffleSeed: UInt64)
        /// An event of this session from the engine, in socket order.
        case event(WireEvent)
        /// The engine answered `call`: a play id for a play or a next ask, nothing for a control.
        case answered(Call, Result<UInt64?, APIError>)
        case resolved(lookup: UInt64, Result<Resolution, APIError>)
        /// `request`'s caller is answered now, its URL still resolving.
        case answerEarly(request: UInt64)
    }

    enum Action: Sendable {
        case call(Call)
        /// Resolves a lookup's URL (`.resolved` follows), or calls it off (the engine's work ends).
        case resolve(lookup: UInt64, url: String)
        case callOff(lookup: UInt64)
        /// A text message for every client of the session.
        case broadcast(String)
        case persist(SessionSnapshot)
        /// `request`'s caller gets its answer: the state as it is then, or the error.
        case finish(request: UInt64, Result<Void, APIError>)
    }

    /// An engine call and what its answer continues.
    struct Call: Sendable {
        enum Kind: Sendable {
            case play(
                url: String, startMS: Int64?, startAtMS: Int64?, volume: Int, filters: Filters, normalize: Bool, cue: Bool,
                generation: UInt64)
            case control(SessionControl, then: AfterControl)
            case next(NextAsk.Ask)
        }
        let kind: Kind
        let origin: Origin
    }

    /// What an accepted control leads to.
    enum AfterControl: Sendable {
        case done
        case queue(SessionQueue.Input)
        case seeked(generation: UInt64, positionMS: Int64)
        case volume(Int)
        case filters(Filters)
        case normalize(Bool)
        case cue(Bool)
    }

    indirect enum Origin: Sendable {
        case request(UInt64)
        case lookup(UInt64)
        case advance
        /// A join that beat the next track's answer, inside the ask loop.
        case askLoop
        /// The queue's step after the engine refused `origin`'s play; `origin` then fails with `error`.
        case refused(Origin, APIError)
    }

    /// What an event leaves to start (in a task of its own: events are never held up).
    enum Advance: Sendable, Equatable {
        case play(SessionQueue.Action)
        /// Nothing to start, but the track after the new current one is to be asked for.
        case askNext
    }

    let id: SessionID
    private(set) var snapshot: SessionSnapshot
    /// When `snapshot.positionMS` was last true; the position moves on from there while playing.
    private var positionAt: ContinuousClock.Instant
    private var intent: UInt64 = 0
    /// Engine play id → queue generation, for the plays started here.
    private var plays: [UInt64: UInt64] = [:]
    private var startsInFlight = 0
    /// Events of plays whose id is not known yet (the socket can beat the HTTP answer).
    private var unclaimed: [WireEvent] = []
    /// The last time a play was in progress or the state changed (for releasing stale sessions).
    private(set) var lastActive: ContinuousClock.Instant
    private var lookups = Lookups()
    private var next = NextAsk()
    /// A playlist's entries still to queue after its first plays, by lookup.
    private var rest: [UInt64: [Track]] = [:]

    /// The most tracks a queue holds; a playlist fills what room is left.
    static let maxQueueLength = 1_000
    /// `finished` codes of a play that ended with its engine rather than by a command (`fenced`:
    /// its pair could not prove it still owned the session; the pair that plays it next goes on).
    static let lostWithEngine: Set<String> = ["engine_stopping", "engine_restarted", "fenced"]

    /// The furthest seek accepted: the engine's bound on positions (2^40 ms, about 35 years).
    static let maxPositionMS: Int64 = 1 << 40

    init(id: SessionID, snapshot: SessionSnapshot, now: ContinuousClock.Instant) {
        self.id = id
        self.snapshot = snapshot
        positionAt = now
        lastActive = now
        if let playID = snapshot.playID { plays[playID] = snapshot.queue.generation }
    }

    // MARK: What it is

    var activePlayID: UInt64? { snapshot.queue.status == .idle ? nil : snapshot.playID }

    /// Nothing plays and nothing is being resolved.
    var isIdle: Bool { snapshot.queue.status == .idle && lookups.isEmpty }

    func view(at now: ContinuousClock.Instant) -> SessionView {
        let queue = snapshot.queue
        return SessionView(
            sessionID: id.description, status: "\(queue.status)", current: queue.current,
            nowPlaying: queue.currentTrack, queue: queue.tracks, positionMS: position(at: now),
            durationMS: queue.currentTrack?.durationMS, volume: snapshot.volume, filters: snapshot.filters,
            normalize: snapshot.normalize, cue: snapshot.cue, crossfadeMS: snapshot.crossfadeMS,
            paused: queue.status == .paused, loop: queue.loop, resolving: lookups.pending)
    }

    /// The snapshot with the position where the track is at `now` (a hand-over's checkpoint).
    func checkpoint(at now: ContinuousClock.Instant) -> SessionSnapshot {
        var current = snapshot
        current.positionMS = position(at: now)
        return current
    }

    /// Where the current track is at `now`, in ms of the track (which a timescale makes run faster
    /// or slower than the clock).
    func position(at now: ContinuousClock.Instant) -> Int64 {
        guard snapshot.queue.status == .playing else { return snapshot.positionMS }
        let elapsed = now - positionAt
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        let moved = Int64(min(milliseconds * snapshot.filters.sourceRate, 1e15))
        let position = snapshot.positionMS + moved
        return snapshot.queue.currentTrack?.durationMS.map { min(position, $0) } ?? position
    }

    // MARK: Inputs

    mutating func handle(_ input: Input, now: ContinuousClock.Instant) -> [Action] {
        var step = Step(now: now)
        switch input {
        case .command(let command, let request, let seed):
            lastActive = now
            perform(command, request: request, seed: seed, &step)
        case .event(let event):
            if let advance = receive(event, &step) { start(advance, origin: .advance, &step) }
        case .answered(let call, let result):
            answered(call, result, &step)
        case .resolved(let number, let result):
            resolved(number, result, &step)
        case .answerEarly(let request):
            guard lookups.answerEarly(request: request) != nil else { break }
            changed(&step)
            askForNext(for: request, &step)
        }
        return step.actions
    }

    /// The actions one input leads to, and its time.
    struct Step {
        let now: ContinuousClock.Instant
        var actions: [Action] = []
    }
}

// MARK: - Commands and the URLs they resolve

extension SessionMachine {
    private mutating func perform(_ command: SessionCommand, request: UInt64, seed: UInt64, _ step: inout Step) {
        // A stop is a stop even when the engine's end came first: nobody resumes it after.
        if command == .stop { snapshot.interrupted = false }
        let origin = Origin.request(request)
        switch command {
        case .play(let url):
            resolve(url, isPlay: true, ticket: newIntent(&step), request: request, &step)
        case .enqueue(let url):
            resolve(url, isPlay: false, ticket: intent, request: request, &step)
        case .remove(let index):
            if index == snapshot.queue.current { newIntent(&step) }
            apply(.remove(index: index), origin, &step)
        case .clear:
            newIntent(&step)
            callOff({ _ in true }, &step)
            apply(.clear, origin, &step)
        case .jump(let index):
            newIntent(&step)
            apply(.jump(index: index), origin, &step)
        case .next:
            newIntent(&step)
            apply(.next, origin, &step)
        case .previous:
            newIntent(&step)
            apply(.previous(positionMS: position(at: step.now)), origin, &step)
        case .stop:
            newIntent(&step)
            apply(.stop, origin, &step)
        case .pause:
            apply(.pause, origin, &step)
        case .resume:
            apply(.resume, origin, &step)
        case .seek(let target):
            guard (0...Self.maxPositionMS).contains(target) else {
                return complete(origin, .failure(.badRequest("invalid_position", "position_ms must be from 0 to \(Self.maxPositionMS)")), &step)
            }
            guard snapshot.queue.status == .playing || snapshot.queue.status == .paused else {
                return complete(
                    origin, .failure(APIError(status: .conflict, code: "invalid_state", message: "nothing is playing to seek in")),
                    &step)
            }
            // Named by play id: the engine refuses it if that play was replaced meanwhile.
            let seek = SessionControl.seek(positionMS: target, playID: snapshot.playID)
            call(.control(seek, then: .seeked(generation: snapshot.queue.generation, positionMS: target)), origin, &step)
        case .volume(let volume):
            guard (0...1000).contains(volume) else {
                return complete(
                    origin, .failure(.badRequest("invalid_volume", "volume is a percentage from 0 to 1000 (100 = unchanged)")), &step)
            }
            setting(.volume(volume), .volume(volume), origin, &step)
        case .filters(let filters):
            if let problem = filters.problem { return complete(origin, .failure(.badRequest("invalid_filters", problem)), &step) }
            setting(.filters(filters), .filters(filters), origin, &step)
        case .normalize(let enabled):
            setting(.normalize(enabled), .normalize(enabled), origin, &step)
        case .cue(let enabled):
            setting(.cue(enabled), .cue(enabled), origin, &step)
        case .crossfade(let milliseconds):
            guard (0...NextRequest.maxCrossfadeMS).contains(milliseconds) else {
                return complete(
                    origin,
                    .failure(.badRequest("invalid_crossfade", "crossfade_ms is from 0 (gapless) to \(NextRequest.maxCrossfadeMS) ms")),
                    &step)
            }
            snapshot.crossfadeMS = milliseconds
            changed(&step)
            complete(origin, .success(()), &step)
        case .loop(let mode):
            apply(.setLoop(mode), origin, &step)
        case .shuffle:
            apply(.shuffle(seed: seed), origin, &step)
        }
    }

    /// A setting that outlives tracks: the engine applies it to the play in progress first, if any.
    private mutating func setting(_ control: SessionControl, _ then: AfterControl, _ origin: Origin, _ step: inout Step) {
        guard snapshot.queue.status == .idle else { return call(.control(control, then: then), origin, &step) }
        accepted(then, origin, &step)
    }

    // MARK: URLs resolving

    /// A command that chooses what plays: plays still resolving are called off (their place at
    /// the engine freed), since they would be dropped when they came back.
    @discardableResult
    private mutating func newIntent(_ step: inout Step) -> UInt64 {
        intent += 1
        callOff({ $0.isPlay }, &step)
        return intent
    }

    /// Resolves `url` for a `play` or `queue` command, then carries the command out. The request
    /// waits (its caller is answered early, `.answerEarly`, if that takes long).
    private mutating func resolve(_ url: String, isPlay: Bool, ticket: UInt64, request: UInt64, _ step: inout Step) {
        guard !lookups.isFull else {
            return complete(
                .request(request),
                .failure(
                    APIError(
                        status: .tooManyRequests, code: "too_many_pending",
                        message: "\(lookups.count) URLs of this session are still being resolved, the most it may have; "
                            + "wait for them before adding \(url)", retryAfterSeconds: 5)), &step)
        }
        _ = lookups.add(url: url, isPlay: isPlay, ticket: ticket, request: request)
        startNextLookup(&step)
    }

    private mutating func startNextLookup(_ step: inout Step) {
        if let next = lookups.startNext() { step.actions.append(.resolve(lookup: next.number, url: next.url)) }
    }

    /// Calls off the lookups `which` picks: their resolution is cancelled (the engine frees its
    /// place at once), and a caller still waiting is told `superseded`.
    private mutating func callOff(_ which: (Lookups.Lookup) -> Bool, _ step: inout Step) {
        let (gone, told) = lookups.callOff(which)
        guard !gone.isEmpty else { return }
        for calledOff in gone {
            step.actions.append(.callOff(lookup: calledOff.lookup.number))
            if let request = calledOff.request {
                step.actions.append(.finish(request: request, .failure(Self.superseded(calledOff.lookup.url))))
            }
        }
        startNextLookup(&step)
        if told { changed(&step) }
    }

    /// The engine resolved lookup `number`'s URL (or could not): its command is carried out.
    private mutating func resolved(_ number: UInt64, _ resolution: Result<Resolution, APIError>, _ step: inout Step) {
        guard let lookup = lookups.resolved(number) else { return }  // called off meanwhile
        startNextLookup(&step)
        let origin = Origin.lookup(number)
        let tracks: [Track]
        switch resolution {
        case .success(let resolved): tracks = resolved.tracks
        case .failure(let error): return complete(origin, .failure(error), &step)
        }
        let room = Self.maxQueueLength - snapshot.queue.tracks.count
        guard room > 0 else {
            return complete(
                origin,
                .failure(
                    APIError(
                        status: .conflict, code: "queue_full",
                        message: "the queue holds \(Self.maxQueueLength) tracks, the most it may; remove some before adding \(lookup.url)")),
                &step)
        }
        guard lookup.isPlay else {
            return apply(.enqueue(Array(tracks.prefix(room)), autoplay: lookup.ticket == intent), origin, &step)
        }
        guard lookup.ticket == intent, let first = tracks.first else {
            return complete(origin, .failure(Self.superseded(lookup.url)), &step)
        }
        if tracks.count > 1 && room > 1 { rest[number] = Array(tracks.dropFirst().prefix(room - 1)) }
        apply(.playNow(first), origin, &step)
    }

    /// A lookup's command is done (or refused): its caller gets the outcome, or — answered before —
    /// every client hears of a refusal, naming the URL.
    private mutating func settle(_ number: UInt64, _ outcome: Result<Void, APIError>, _ step: inout Step) {
        if case .success = outcome, let tracks = rest.removeValue(forKey: number) {
            // A playlist: its first plays; the rest are queued after it, as one command.
            return apply(.enqueue(tracks, autoplay: false), .lookup(number), &step)
        }
        rest[number] = nil
        let (lookup, request, early) = lookups.settle(number)
        if early, case .failure(let error) = outcome {
            let event = ErrorEvent(sessionID: id.description, code: error.code, message: error.message, url: lookup?.url)
            step.actions.append(.broadcast(event.json()))
            changed(&step)
        }
        guard let request else { return askForNext(for: nil, &step) }
        complete(.request(request), outcome, &step)
        if case .failure = outcome { askForNext(for: nil, &step) }
    }

    private static func superseded(_ url: String) -> APIError {
        APIError(
            status: .conflict, code: "superseded",
            message: "another command changed what plays while \(url) was being resolved; it was not played")
    }
}

// MARK: - The engine: its calls, answers and events, and the next track

extension SessionMachine {
    // MARK: The queue's actions

    /// Hands `input` to the queue and carries out the action it answers.
    private mutating func apply(_ input: SessionQueue.Input, _ origin: Origin, _ step: inout Step) {
        carry(queue(input, &step), origin, &step)
    }

    /// The queue's answer to `input`; the position clock stops and starts with its status.
    private mutating func queue(_ input: SessionQueue.Input, _ step: inout Step) -> SessionQueue.Action {
        let now = position(at: step.now)
        let wasPlaying = snapshot.queue.status == .playing
        let action = snapshot.queue.handle(input)
        if wasPlaying != (snapshot.queue.status == .playing) { setPosition(now, &step) }
        return action
    }

    /// Starts what the queue decided: an engine call, or the end of `origin`'s work.
    private mutating func carry(_ action: SessionQueue.Action, _ origin: Origin, _ step: inout Step) {
        switch action {
        case .play(let track, let generation, let resuming):
            let startMS = resuming ? snapshot.positionMS : nil
            // A hand-over's start time goes with the play that resumes it, and only with that one.
            let startAtMS = resuming ? snapshot.startAtMS : nil
            snapshot.startAtMS = nil
            snapshot.playID = nil
            snapshot.interrupted = false
            setPosition(startMS ?? 0, &step)
            changed(&step)
            startsInFlight += 1
            let play = Call.Kind.play(
                url: track.url, startMS: startMS, startAtMS: startAtMS, volume: snapshot.volume, filters: snapshot.filters,
                normalize: snapshot.normalize, cue: snapshot.cue, generation: generation)
            call(play, origin, &step)
        case .stop:
            snapshot.playID = nil
            snapshot.interrupted = false
            changed(&step)
            call(.control(.stop, then: .done), origin, &step)
        case .pause(let generation):
            // Named by play id: the engine refuses it if that play was replaced meanwhile.
            call(.control(.pause(playID: snapshot.playID), then: .queue(.paused(generation: generation))), origin, &step)
        case .resume(let generation):
            call(.control(.resume(playID: snapshot.playID), then: .queue(.resumed(generation: generation))), origin, &step)
        case .updated:
            changed(&step)
            complete(origin, .success(()), &step)
        case .none:
            complete(origin, .success(()), &step)
        case .refuse(let refusal):
            complete(origin, .failure(Self.error(refusal)), &step)
        }
    }

    private mutating func call(_ kind: Call.Kind, _ origin: Origin, _ step: inout Step) {
        step.actions.append(.call(Call(kind: kind, origin: origin)))
    }

    /// `origin`'s work is done: its caller is answered (after the next track is asked for), an
    /// auto-advance's refusal is told to every client, a lookup settles.
    private mutating func complete(_ origin: Origin, _ outcome: Result<Void, APIError>, _ step: inout Step) {
        switch origin {
        case .request(let request):
            guard case .success = outcome else { return step.actions.append(.finish(request: request, outcome)) }
            askForNext(for: request, &step)
        case .lookup(let number):
            settle(number, outcome, &step)
        case .advance, .askLoop:
            if case .failure(let error) = outcome {
                step.actions.append(.broadcast(ErrorEvent(sessionID: id.description, code: error.code, message: error.message).json()))
            }
            askForNext(for: nil, &step)
            // A join inside the ask loop: the loop goes on (it asks again, since the queue moved).
            if case .askLoop = origin { nextRound(&step) }
        case .refused(let origin, let error):
            complete(origin, .failure(error), &step)
        }
    }

    // MARK: The engine's answers

    private mutating func answered(_ call: Call, _ result: Result<UInt64?, APIError>, _ step: inout Step) {
        switch call.kind {
        case .play(_, _, _, _, _, _, _, let generation):
            startsInFlight -= 1
            guard case .success(let answer) = result, let playID = answer else {
                let error = if case .failure(let error) = result { error } else { APIError.internalError }
                // The engine refused: nothing plays now. Stop here rather than try every track.
                return carry(queue(.finished(generation: generation, reason: .other), &step), .refused(call.origin, error), &step)
            }
            plays[playID] = generation
            if snapshot.queue.generation == generation { snapshot.playID = playID }
            // Events that beat the answer; the last of them may have ended the play already.
            let advance = claimEarlyEvents(of: playID, &step)
            changed(&step)
            guard case .play(let action)? = advance else { return complete(call.origin, .success(()), &step) }
            carry(action, call.origin, &step)
        case .control(_, let then):
            guard case .success = result else {
                let error = if case .failure(let error) = result { error } else { APIError.internalError }
                return complete(call.origin, .failure(error), &step)
            }
            accepted(then, call.origin, &step)
        case .next(let ask):
            let playID = (try? result.get()) ?? nil
            next.answered(ask, playID: playID)
            // A join that beat the answer runs first; the loop goes on after it.
            if let playID, ask.url != nil, let advance = claimEarlyEvents(of: playID, &step) {
                return start(advance, origin: .askLoop, &step)
            }
            nextRound(&step)
        }
    }

    /// What an accepted control leads to.
    private mutating func accepted(_ then: AfterControl, _ origin: Origin, _ step: inout Step) {
        switch then {
        case .done:
            return complete(origin, .success(()), &step)
        case .queue(let input):
            return apply(input, origin, &step)
        case .seeked(let generation, let target):
            // Another command may have replaced the track meanwhile; the seek was for the old one.
            guard snapshot.queue.generation == generation else { return complete(origin, .success(()), &step) }
            setPosition(target, &step)
        case .volume(let volume):
            snapshot.volume = volume
        case .filters(let filters):
            // The track's time runs at the new rate from here.
            if filters.sourceRate != snapshot.filters.sourceRate { setPosition(position(at: step.now), &step) }
            snapshot.filters = filters
        case .normalize(let enabled):
            snapshot.normalize = enabled
        case .cue(let enabled):
            snapshot.cue = enabled
        }
        changed(&step)
        complete(origin, .success(()), &step)
    }

    /// Starts what an event left to start.
    private mutating func start(_ advance: Advance, origin: Origin, _ step: inout Step) {
        switch advance {
        case .play(let action): carry(action, origin, &step)
        case .askNext: complete(origin, .success(()), &step)
        }
    }

    // MARK: The engine's events

    /// An event of this session (in socket order); answers what it leaves to start.
    private mutating func receive(_ event: WireEvent, _ step: inout Step) -> Advance? {
        guard let playID = event.playID else { return nil }
        if event.type == .ready, let asked = next.asked, asked.playID == playID, asked.after == snapshot.playID {
            return joined(asked, event, &step)
        }
        guard let generation = plays[playID] else {
            // Possibly a play whose id is still on its way back over HTTP.
            if startsInFlight + next.inFlight > 0 && unclaimed.count < 64 { unclaimed.append(event) }
            return nil
        }
        let current = generation == snapshot.queue.generation
        switch event.type {
        case .ready:
            if current {
                setPosition(event.positionMS ?? snapshot.positionMS, &step)
                lastActive = step.now
            }
            if queue(.ready(generation: generation, title: event.title, durationMS: event.durationMS), &step) != .none {
                changed(&step)
            }
            // The play's id is known and it plays: the track after it can be opened ahead.
            if current { return .askNext }
        case .finished:
            plays.removeValue(forKey: playID)
            let reason: SessionQueue.EndReason =
                switch event.reason {
                case .finished: .finished
                case .error: .error
                default: .other
                }
            guard current else { return nil }
            lastActive = step.now
            snapshot.playID = nil
            let wasPlaying = snapshot.queue.status == .playing || snapshot.queue.status == .starting
            let action = queue(.finished(generation: generation, reason: reason), &step)
            if wasPlaying, Self.lostWithEngine.contains(event.code ?? "") { snapshot.interrupted = true }
            if case .play = action { return .play(action) }
            if action != .none { changed(&step) }
        case .progress, .seeked:
            guard current, let position = event.positionMS else { return nil }
            setPosition(position, &step)
            if event.type == .seeked { changed(&step) } else { step.actions.append(.persist(snapshot)) }
        case .paused, .resumed:
            guard current else { return nil }
            if let position = event.positionMS { setPosition(position, &step) }
        case .volume:
            if let volume = event.volume, current { snapshot.volume = volume }
        default:
            break
        }
        return nil
    }

    /// The engine joined the play it was asked to open ahead: the queue moves on as if the
    /// current track had ended, onto that play, without asking for it again.
    private mutating func joined(_ asked: NextAsk.Asked, _ event: WireEvent, _ step: inout Step) -> Advance? {
        next.asked = nil
        let action = queue(.finished(generation: snapshot.queue.generation, reason: .finished), &step)
        guard case .play(let track, let generation, _) = action, track.url == asked.url else {
            // The queue wanted something else meanwhile: it starts that, which ends the joined play.
            if case .play = action { return .play(action) }
            if action != .none { changed(&step) }
            return nil
        }
        plays[asked.playID] = generation
        snapshot.playID = asked.playID
        setPosition(event.positionMS ?? 0, &step)
        lastActive = step.now
        _ = queue(.ready(generation: generation, title: event.title, durationMS: event.durationMS), &step)
        changed(&step)
        return .askNext
    }

    /// Handles the events of `playID` that arrived before its id came back over HTTP; answers what
    /// the last of them leaves to start.
    private mutating func claimEarlyEvents(of playID: UInt64, _ step: inout Step) -> Advance? {
        let early = unclaimed.filter { $0.playID == playID }
        unclaimed.removeAll { $0.playID == playID }
        var advance: Advance?
        for event in early { advance = receive(event, &step) ?? advance }
        return advance
    }

    // MARK: The track that follows

    /// Tells the engine which track follows the current play, whenever that changes (a track
    /// added, removed or moved, the loop mode, a skip, a new play, the crossfade): it opens it
    /// ahead and joins it on the sample or over the crossfade. One ask at a time, so the engine
    /// gets them in order; `request` is answered when the asking is done (at once if another
    /// command's asking is under way: that one asks again for it). A refusal only costs the join.
    private mutating func askForNext(for request: UInt64?, _ step: inout Step) {
        guard next.start(for: request) else {
            if let request { step.actions.append(.finish(request: request, .success(()))) }
            return
        }
        askRound(&step)
    }

    private mutating func askRound(_ step: inout Step) {
        next.round()
        let active = snapshot.queue.status == .playing || snapshot.queue.status == .paused
        if let ask = next.wanted(
            playID: snapshot.playID, active: active, upcoming: snapshot.queue.upcoming?.url, crossfadeMS: snapshot.crossfadeMS)
        {
            next.sent()
            return call(.next(ask), .askLoop, &step)
        }
        nextRound(&step)
    }

    /// A round of asking is over: another, or the end of the loop and the answers that waited for it.
    private mutating func nextRound(_ step: inout Step) {
        let (again, waiters) = next.finishRound()
        guard !again else { return askRound(&step) }
        for request in waiters { step.actions.append(.finish(request: request, .success(()))) }
    }

    // MARK: Helpers

    private mutating func setPosition(_ position: Int64, _ step: inout Step) {
        snapshot.positionMS = position
        positionAt = step.now
    }

    /// Every client hears the new state, and it is stored.
    private mutating func changed(_ step: inout Step) {
        step.actions.append(.broadcast(view(at: step.now).json()))
        step.actions.append(.persist(snapshot))
    }

    private static func error(_ refusal: SessionQueue.Refusal) -> APIError {
        switch refusal {
        // Well formed, but the queue has no such position (now): a conflict with its state.
        case .badIndex(let message): APIError(status: .conflict, code: "invalid_index", message: message)
        case .invalidState(let message): APIError(status: .conflict, code: "invalid_state", message: message)
        }
    }
}
