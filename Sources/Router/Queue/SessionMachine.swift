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
            case play(url: String, startMS: Int64?, volume: Int, filters: Filters, normalize: Bool, generation: UInt64)
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

    // The state below is changed only by the machine's own inputs (this file and its two
    // extensions, which need it internal); the controller holds the machine privately.
    let id: SessionID
    var snapshot: SessionSnapshot
    /// When `snapshot.positionMS` was last true; the position moves on from there while playing.
    var positionAt: ContinuousClock.Instant
    var intent: UInt64 = 0
    /// Engine play id → queue generation, for the plays started here.
    var plays: [UInt64: UInt64] = [:]
    var startsInFlight = 0
    /// Events of plays whose id is not known yet (the socket can beat the HTTP answer).
    var unclaimed: [WireEvent] = []
    /// The last time a play was in progress or the state changed (for releasing stale sessions).
    var lastActive: ContinuousClock.Instant
    var lookups = Lookups()
    var next = NextAsk()
    /// A playlist's entries still to queue after its first plays, by lookup.
    var rest: [UInt64: [Track]] = [:]

    /// The most tracks a queue holds; a playlist fills what room is left.
    static let maxQueueLength = 1_000
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
            normalize: snapshot.normalize, crossfadeMS: snapshot.crossfadeMS,
            paused: queue.status == .paused, loop: queue.loop, resolving: lookups.pending)
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
