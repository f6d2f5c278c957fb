// Every decision about one session the Router runs, as a value: what a command, an engine event,
// an engine's answer or a resolved URL leads to. Inputs in, actions out; nothing here waits, reads
// a clock or does I/O (the time comes with each input). `SessionController` carries the actions
// out and hands the engine's answers back as inputs; `SessionQueue` decides what plays.
//
// Races are settled by two counters. The queue's generation names the play the engine should be
// doing; an event of any other play is stale and dropped. The resolving machine's `intent` counts
// the commands that choose what plays; a play whose URL was still resolving when a newer such
// command came is called off, so the last click wins whatever order the resolves finish in.
//
// An engine call carries its `Origin`: the request whose caller waits for it (answered by
// `.finish` once its work, and the ask for the next track it leads to, is done), a URL resolved
// for a `play` or `queue` (`ResolvingMachine`), an auto-advance, or the ask loop (`NextAsk`).
//
// The decisions of a session are in this file and its extension, in three parts: what it is (the
// state and the view clients get), the commands and the URLs they resolve (the resolving
// machine's answers carried out), and the engine (SessionMachine+Engine: its calls, answers and
// events, and the track that follows).
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
        /// Whether the session went to a pair with room after this engine refused `call`'s play
        /// as full (`seekRoom`).
        case roomSought(Call, APIError, moved: Bool)
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
        /// This engine refused `call`'s play as full: the session, as `snapshot` (stopped at the
        /// track and position the play was for), is to go to a pair of the cluster with room,
        /// which plays it from there; `.roomSought` says whether it went.
        case seekRoom(Call, APIError, SessionSnapshot)
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
    /// Changed by the machine alone (here and in SessionMachine+Engine).
    var snapshot: SessionSnapshot
    /// When `snapshot.positionMS` was last true; the position moves on from there while playing.
    var positionAt: ContinuousClock.Instant
    /// Until when a position in the engine's `progress`, `paused` or `resumed` is not taken: a
    /// seek was just answered, and such an event sent before it may still be on its way (the
    /// engine's `seeked` ends the wait).
    var positionHeldUntil: ContinuousClock.Instant?
    /// Engine play id → queue generation, for the plays started here.
    var plays: [UInt64: UInt64] = [:]
    var startsInFlight = 0
    /// Events of plays whose id is not known yet (the socket can beat the HTTP answer).
    var unclaimed: [WireEvent] = []
    /// The last time a play was in progress or the state changed (for releasing stale sessions).
    var lastActive: ContinuousClock.Instant
    /// The `play` and `queue` commands whose URL is resolving.
    private var resolving = ResolvingMachine()
    var next = NextAsk()
    /// A pair of a cluster: a play its engine refuses as full goes to a pair with room instead.
    var movesForRoom = false
    /// The engine stopped the play for its fence (`fenced`) while it played: a pair that still
    /// holds the session plays it on (`ClusterMember`'s rounds, through
    /// `SessionController.takeLostToFence`); any play or stop since clears it.
    var lostToFence = false

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
    var isIdle: Bool { snapshot.queue.status == .idle && resolving.isEmpty }

    func view(at now: ContinuousClock.Instant) -> SessionView {
        let queue = snapshot.queue
        return SessionView(
            sessionID: id.description, status: "\(queue.status)", current: queue.current,
            nowPlaying: queue.currentTrack, queue: queue.tracks, positionMS: position(at: now),
            durationMS: queue.currentTrack?.durationMS, volume: snapshot.volume, filters: snapshot.filters,
            normalize: snapshot.normalize, cue: snapshot.cue, crossfadeMS: snapshot.crossfadeMS,
            paused: queue.status == .paused, loop: queue.loop, resolving: resolving.pending, following: snapshot.following)
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
            guard resolving.answerEarly(request: request) else { break }
            changed(&step)
            askForNext(for: request, &step)
        case .roomSought(let call, let error, let moved):
            roomSought(call, error, moved: moved, &step)
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
    mutating func perform(_ command: SessionCommand, request: UInt64, seed: UInt64, _ step: inout Step) {
        // A stop is a stop even when the engine's end came first: nobody resumes it after.
        if command == .stop { snapshot.interrupted = false }
        let origin = Origin.request(request)
        if let station = snapshot.following, !command.isAboutFollowing {
            let message = "this session follows \(station): unfollow it first (its clients hear that session's controls)"
            return complete(origin, .failure(APIError(status: .conflict, code: "following", message: message)), &step)
        }
        switch command {
        case .follow(let station):
            // What this session played stops; its queue stays for when it unfollows.
            newIntent(&step)
            carry(resolving.callOffAll(), &step)
            snapshot.following = station.description
            guard snapshot.queue.status == .idle else { return apply(.stop, origin, &step) }
            changed(&step)
            complete(origin, .success(()), &step)
        case .unfollow:
            guard snapshot.following != nil else {
                return complete(
                    origin, .failure(APIError(status: .conflict, code: "not_following", message: "this session follows no station")), &step)
            }
            snapshot.following = nil
            changed(&step)
            complete(origin, .success(()), &step)
        case .play(let url):
            newIntent(&step)
            resolve(url, isPlay: true, request: request, &step)
        case .enqueue(let url):
            resolve(url, isPlay: false, request: request, &step)
        case .remove(let index):
            if index == snapshot.queue.current { newIntent(&step) }
            apply(.remove(index: index), origin, &step)
        case .clear:
            newIntent(&step)
            carry(resolving.callOffAll(), &step)
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
    mutating func setting(_ control: SessionControl, _ then: AfterControl, _ origin: Origin, _ step: inout Step) {
        guard snapshot.queue.status == .idle else { return call(.control(control, then: then), origin, &step) }
        accepted(then, origin, &step)
    }

    // MARK: URLs resolving

    /// A command that chooses what plays: plays still resolving are called off.
    mutating func newIntent(_ step: inout Step) {
        carry(resolving.choose(), &step)
    }

    /// Resolves `url` for a `play` or `queue` command, then carries the command out. The request
    /// waits (its caller is answered early, `.answerEarly`, if that takes long).
    mutating func resolve(_ url: String, isPlay: Bool, request: UInt64, _ step: inout Step) {
        switch resolving.add(url, isPlay: isPlay, request: request) {
        case .success(let effects): carry(effects, &step)
        case .failure(let error): complete(.request(request), .failure(error), &step)
        }
    }

    /// Carries out what the resolving machine answered.
    mutating func carry(_ effects: [ResolvingMachine.Effect], _ step: inout Step) {
        for effect in effects {
            switch effect {
            case .resolve(let lookup, let url): step.actions.append(.resolve(lookup: lookup, url: url))
            case .callOff(let lookup): step.actions.append(.callOff(lookup: lookup))
            case .superseded(let request, let url):
                step.actions.append(.finish(request: request, .failure(ResolvingMachine.superseded(url))))
            case .changed: changed(&step)
            }
        }
    }

    /// The engine resolved lookup `number`'s URL (or could not): its command is carried out.
    mutating func resolved(_ number: UInt64, _ resolution: Result<Resolution, APIError>, _ step: inout Step) {
        let room = Self.maxQueueLength - snapshot.queue.tracks.count
        let (outcome, effects) = resolving.resolved(number, resolution, room: room, maxQueueLength: Self.maxQueueLength)
        carry(effects, &step)
        switch outcome {
        case .gone: return
        case .failed(let error): complete(.lookup(number), .failure(error), &step)
        case .queue(let input): apply(input, .lookup(number), &step)
        }
    }

    /// A lookup's command is done (or refused): its caller gets the outcome, or — answered before —
    /// every client hears of a refusal, naming the URL.
    mutating func settle(_ number: UInt64, _ outcome: Result<Void, APIError>, _ step: inout Step) {
        let succeeded = if case .success = outcome { true } else { false }
        switch resolving.settle(number, succeeded: succeeded) {
        case .queueRest(let tracks):
            // A playlist: its first plays; the rest are queued after it, as one command.
            apply(.enqueue(tracks, autoplay: false), .lookup(number), &step)
        case .done(let url, let request, let early):
            if early, case .failure(let error) = outcome {
                let event = ErrorEvent(sessionID: id.description, code: error.code, message: error.message, url: url)
                step.actions.append(.broadcast(event.json()))
                changed(&step)
            }
            guard let request else { return askForNext(for: nil, &step) }
            complete(.request(request), outcome, &step)
            if case .failure = outcome { askForNext(for: nil, &step) }
        }
    }
}
