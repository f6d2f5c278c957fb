// The engine's side of a session's decisions (SessionMachine): the calls the queue's actions make,
// the engine's answers and events, and the track that follows, asked for ahead.
import EngineAPI
import HTTPTypes
import ServiceSupport
import WireProtocol

// MARK: - The engine: its calls, answers and events, and the next track

extension SessionMachine {
    // MARK: The queue's actions

    /// Hands `input` to the queue and carries out the action it answers.
    mutating func apply(_ input: SessionQueue.Input, _ origin: Origin, _ step: inout Step) {
        carry(queue(input, &step), origin, &step)
    }

    /// The queue's answer to `input`; the position clock stops and starts with its status.
    mutating func queue(_ input: SessionQueue.Input, _ step: inout Step) -> SessionQueue.Action {
        let now = position(at: step.now)
        let wasPlaying = snapshot.queue.status == .playing
        let action = snapshot.queue.handle(input)
        if wasPlaying != (snapshot.queue.status == .playing) { setPosition(now, &step) }
        return action
    }

    /// Starts what the queue decided: an engine call, or the end of `origin`'s work.
    mutating func carry(_ action: SessionQueue.Action, _ origin: Origin, _ step: inout Step) {
        switch action {
        case .play(let track, let generation, let resuming):
            let startMS = resuming ? snapshot.positionMS : nil
            // A hand-over's start time goes with the play that resumes it, and only with that one.
            let startAtMS = resuming ? snapshot.startAtMS : nil
            snapshot.startAtMS = nil
            snapshot.playID = nil
            snapshot.interrupted = false
            lostToFence = false
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
            lostToFence = false
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

    mutating func call(_ kind: Call.Kind, _ origin: Origin, _ step: inout Step) {
        step.actions.append(.call(Call(kind: kind, origin: origin)))
    }

    /// `origin`'s work is done: its caller is answered (after the next track is asked for), an
    /// auto-advance's refusal is told to every client, a lookup settles.
    mutating func complete(_ origin: Origin, _ outcome: Result<Void, APIError>, _ step: inout Step) {
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

    mutating func answered(_ call: Call, _ result: Result<UInt64?, APIError>, _ step: inout Step) {
        switch call.kind {
        case .play(_, _, _, _, _, _, _, let generation):
            startsInFlight -= 1
            guard case .success(let answer) = result, let playID = answer else {
                let error = if case .failure(let error) = result { error } else { APIError.internalError }
                // A full engine in a cluster: the session may play on a pair with room instead.
                if movesForRoom, error.code == "engine_full", snapshot.queue.generation == generation {
                    return step.actions.append(.seekRoom(call, error, checkpoint(at: step.now)))
                }
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

    /// The runner's answer to `.seekRoom`. Moved: the session plays on the other pair, and the
    /// caller of `call` hears it start there. Not moved (no pair has room): the refusal stands.
    mutating func roomSought(_ call: Call, _ error: APIError, moved: Bool, _ step: inout Step) {
        guard case .play(_, _, _, _, _, _, _, let generation) = call.kind else { return }
        if moved { return complete(call.origin, .success(()), &step) }
        carry(queue(.finished(generation: generation, reason: .other), &step), .refused(call.origin, error), &step)
    }

    /// What an accepted control leads to.
    mutating func accepted(_ then: AfterControl, _ origin: Origin, _ step: inout Step) {
        switch then {
        case .done:
            return complete(origin, .success(()), &step)
        case .queue(let input):
            return apply(input, origin, &step)
        case .seeked(let generation, let target):
            // Another command may have replaced the track meanwhile; the seek was for the old one.
            guard snapshot.queue.generation == generation else { return complete(origin, .success(()), &step) }
            setPosition(target, &step)
            positionHeldUntil = step.now + .seconds(1)
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
    mutating func start(_ advance: Advance, origin: Origin, _ step: inout Step) {
        switch advance {
        case .play(let action): carry(action, origin, &step)
        case .askNext: complete(origin, .success(()), &step)
        }
    }

    // MARK: The engine's events

    /// An event of this session (in socket order); answers what it leaves to start.
    mutating func receive(_ event: WireEvent, _ step: inout Step) -> Advance? {
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
            lostToFence = wasPlaying && event.code == "fenced"
            if case .play = action { return .play(action) }
            if action != .none { changed(&step) }
        case .progress, .seeked:
            guard current, let position = event.positionMS else { return nil }
            if event.type == .seeked {
                positionHeldUntil = nil
            } else if let held = positionHeldUntil, step.now < held {
                return nil
            }
            setPosition(position, &step)
            if event.type == .seeked { changed(&step) } else { step.actions.append(.persist(snapshot)) }
        case .paused, .resumed:
            guard current else { return nil }
            if let position = event.positionMS, step.now >= positionHeldUntil ?? step.now { setPosition(position, &step) }
        case .volume:
            if let volume = event.volume, current { snapshot.volume = volume }
        default:
            break
        }
        return nil
    }

    /// The engine joined the play it was asked to open ahead: the queue moves on as if the
    /// current track had ended, onto that play, without asking for it again.
    mutating func joined(_ asked: NextAsk.Asked, _ event: WireEvent, _ step: inout Step) -> Advance? {
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
    mutating func claimEarlyEvents(of playID: UInt64, _ step: inout Step) -> Advance? {
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
    mutating func askForNext(for request: UInt64?, _ step: inout Step) {
        guard next.start(for: request) else {
            if let request { step.actions.append(.finish(request: request, .success(()))) }
            return
        }
        askRound(&step)
    }

    mutating func askRound(_ step: inout Step) {
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
    mutating func nextRound(_ step: inout Step) {
        let (again, waiters) = next.finishRound()
        guard !again else { return askRound(&step) }
        for request in waiters { step.actions.append(.finish(request: request, .success(()))) }
    }

    // MARK: Helpers

    mutating func setPosition(_ position: Int64, _ step: inout Step) {
        snapshot.positionMS = position
        positionAt = step.now
    }

    /// Every client hears the new state, and it is stored.
    mutating func changed(_ step: inout Step) {
        step.actions.append(.broadcast(view(at: step.now).json()))
        step.actions.append(.persist(snapshot))
    }

    static func error(_ refusal: SessionQueue.Refusal) -> APIError {
        switch refusal {
        // Well formed, but the queue has no such position (now): a conflict with its state.
        case .badIndex(let message): APIError(status: .conflict, code: "invalid_index", message: message)
        case .invalidState(let message): APIError(status: .conflict, code: "invalid_state", message: message)
        }
    }
}
