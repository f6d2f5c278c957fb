// The session machine's commands: what each asks of the queue and the engine, and the `play` and
// `queue` URLs resolved before they are carried out (one at a time per session, `Lookups`).
import EngineAPI
import HTTPTypes
import ServiceSupport
import WireProtocol

extension SessionMachine {
    mutating func perform(_ command: SessionCommand, request: UInt64, seed: UInt64, _ step: inout Step) {
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
    mutating func resolved(_ number: UInt64, _ resolution: Result<Resolution, APIError>, _ step: inout Step) {
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
    mutating func settle(_ number: UInt64, _ outcome: Result<Void, APIError>, _ step: inout Step) {
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

    static func superseded(_ url: String) -> APIError {
        APIError(
            status: .conflict, code: "superseded",
            message: "another command changed what plays while \(url) was being resolved; it was not played")
    }
}
