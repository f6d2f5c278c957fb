// One session as the Router runs it: the actor that carries out what its `SessionMachine` decides
// — engine calls, resolving URLs, broadcasts, stored snapshots, answers to callers — and hands
// every outcome back to the machine. It decides nothing itself; every decision about a session
// is in the machine (and the queue under it).
//
// A command's caller waits for its answer; a `play` or `queue` whose URL is not resolved within
// `quickAnswer` is answered with the URL under `resolving`, and its outcome reaches every client
// as a `state`, or as an `error` naming the URL. An event's engine calls (an auto-advance) are left
// to the caller to run in a task of its own (`PendingPlay`), so events are never held up.
import EngineAPI
import Foundation
import HTTPTypes
import ServiceSupport
import WireProtocol

actor SessionController {
    nonisolated let id: SessionID
    private var machine: SessionMachine
    private let engine: any EngineControl
    private let sink: SessionSink
    private let shuffleSeed: @Sendable () -> UInt64
    /// The longest a `play` or `queue` waits for its URL before answering with it under `resolving`.
    private let quickAnswer: Duration
    /// Answers of the commands in progress, by request.
    private var answers: [UInt64: Eventual<Result<Void, APIError>>] = [:]
    private var requestsMade: UInt64 = 0
    /// Signals of the lookups resolving, which call them off.
    private var resolving: [UInt64: CancellationSignal] = [:]
    /// A session handed over from another pair plays there until then: commands wait for it,
    /// so nothing this pair starts is heard while that pair's last frames are.
    private var commandsHeldUntil: ContinuousClock.Instant?

    /// The most tracks a queue holds; a playlist fills what room is left.
    static let maxQueueLength = SessionMachine.maxQueueLength
    /// The most URLs a session may have waiting to be resolved.
    static let maxLookups = Lookups.limit
    static let maxPositionMS = SessionMachine.maxPositionMS

    init(
        id: SessionID, snapshot: SessionSnapshot = SessionSnapshot(), engine: any EngineControl, sink: SessionSink,
        shuffleSeed: @escaping @Sendable () -> UInt64 = { UInt64.random(in: .min ... .max) },
        quickAnswer: Duration = .milliseconds(800)
    ) {
        self.id = id
        machine = SessionMachine(id: id, snapshot: snapshot, now: .now)
        machine.movesForRoom = sink.seekRoom != nil
        self.engine = engine
        self.sink = sink
        self.shuffleSeed = shuffleSeed
        self.quickAnswer = quickAnswer
    }

    /// The engine play this session believes is in progress.
    var activePlayID: UInt64? { machine.activePlayID }

    /// Nothing plays and nothing is being resolved.
    var isIdle: Bool { machine.isIdle }

    /// The last time a play was in progress or the state changed (for releasing stale sessions).
    var lastActive: ContinuousClock.Instant { machine.lastActive }

    var state: SessionView { machine.view(at: .now) }

    /// The snapshot as of now, position included: what a pair handing the session over stores.
    var checkpoint: SessionSnapshot { machine.checkpoint(at: .now) }

    /// Runs `join` on the controller with the current state, so no state change falls between
    /// the state a client gets first and its subscription (every change is broadcast from here).
    func withCurrentState<T: Sendable>(_ join: @Sendable (SessionView) -> T) -> T { join(state) }

    // MARK: Commands

    /// Carries out a command and answers the state after it.
    @discardableResult
    func perform(_ command: SessionCommand) async throws(APIError) -> SessionView {
        if let until = commandsHeldUntil {
            if until > .now { try? await Task.sleep(until: until) }
            commandsHeldUntil = nil
        }
        return try await execute(command)
    }

    /// Whether the engine stopped this session's play for its fence while it played, with no
    /// play or stop since; asking clears it, so one loss leads to one resume.
    func takeLostToFence() -> Bool {
        defer { machine.lostToFence = false }
        return machine.lostToFence
    }

    /// Resumes a session handed over from another pair (its snapshot names the moment its play
    /// starts); commands wait until `heldUntil`.
    func resumeHandedOver(heldUntil: ContinuousClock.Instant) async throws(APIError) {
        commandsHeldUntil = heldUntil
        try await execute(.resume)
    }

    @discardableResult
    private func execute(_ command: SessionCommand) async throws(APIError) -> SessionView {
        requestsMade += 1
        let request = requestsMade
        let answer = Eventual<Result<Void, APIError>>()
        answers[request] = answer
        defer { answers[request] = nil }
        let seed = command == .shuffle ? shuffleSeed() : 0
        await carryOut(machine.handle(.command(command, request: request, shuffleSeed: seed), now: .now))
        var outcome = await answer.value(within: quickAnswer)
        if outcome == nil {
            // Still resolving: the caller has its answer; the end goes to every client.
            await carryOut(machine.handle(.answerEarly(request: request), now: .now))
            outcome = await answer.wait()
        }
        try outcome?.get()
        return state
    }

    // MARK: Engine events

    /// What an event left for the engine, to run in a task of its own (`advance`).
    struct PendingPlay: Sendable {
        fileprivate let actions: [SessionMachine.Action]
    }

    /// An event of this session from the engine (in socket order). What it leads to is done at
    /// once, except engine calls (an auto-advance, the next track's ask): those are answered.
    @discardableResult
    func handle(_ event: WireEvent) -> PendingPlay? {
        var calls: [SessionMachine.Action] = []
        for action in machine.handle(.event(event), now: .now) {
            switch action {
            case .call, .seekRoom: calls.append(action)
            default: carryOutAtOnce(action)
            }
        }
        return calls.isEmpty ? nil : PendingPlay(actions: calls)
    }

    /// Makes the engine calls an event left.
    func advance(_ pending: PendingPlay) async {
        await carryOut(pending.actions)
    }

    // MARK: Carrying actions out

    /// Carries `actions` out in order: an engine call (or the search for a pair with room) is
    /// awaited and its answer handed back to the machine before the next.
    private func carryOut(_ actions: [SessionMachine.Action]) async {
        for action in actions {
            switch action {
            case .call(let call):
                let answer = await self.answer(call)
                await carryOut(machine.handle(.answered(call, answer), now: .now))
            case .seekRoom(let call, let error, let snapshot):
                let moved = await sink.seekRoom?(id, snapshot) ?? false
                await carryOut(machine.handle(.roomSought(call, error, moved: moved), now: .now))
            default:
                carryOutAtOnce(action)
            }
        }
    }

    /// The actions that do not wait.
    private func carryOutAtOnce(_ action: SessionMachine.Action) {
        switch action {
        case .broadcast(let json):
            sink.broadcast(id, json)
        case .persist(let snapshot):
            sink.persist(id, snapshot)
        case .finish(let request, let outcome):
            answers[request]?.set(outcome)
        case .resolve(let lookup, let url):
            let signal = CancellationSignal()
            resolving[lookup] = signal
            sink.spawn(signal) { [engine, id] in
                let resolution: Result<Resolution, APIError>
                do throws(APIError) {
                    resolution = .success(try await engine.resolve(url, owner: id))
                } catch {
                    resolution = .failure(error)
                }
                await self.resolved(lookup, resolution)
            }
        case .callOff(let lookup):
            resolving.removeValue(forKey: lookup)?.fire()
        case .call, .seekRoom:
            assertionFailure("an engine call is awaited, not carried out at once")
        }
    }

    private func resolved(_ lookup: UInt64, _ resolution: Result<Resolution, APIError>) async {
        resolving[lookup] = nil
        await carryOut(machine.handle(.resolved(lookup: lookup, resolution), now: .now))
    }

    /// Makes one engine call.
    private func answer(_ call: SessionMachine.Call) async -> Result<UInt64?, APIError> {
        do throws(APIError) {
            switch call.kind {
            case .play(let url, let startMS, let startAtMS, let volume, let filters, let normalize, let cue, _):
                return .success(
                    try await engine.play(
                        id, url: url, startMS: startMS, startAtMS: startAtMS, volume: volume, filters: filters, normalize: normalize,
                        cue: cue))
            case .control(let control, _):
                try await engine.control(id, control)
                return .success(nil)
            case .next(let ask):
                return .success(try await engine.next(id, url: ask.url, crossfadeMS: ask.crossfadeMS))
            }
        } catch {
            return .failure(error)
        }
    }
}
