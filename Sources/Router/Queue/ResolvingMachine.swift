// The `play` and `queue` commands of one session whose URLs are on their way through the engine's
// `/resolve`, as a machine: what a command, a resolution or its command's outcome leads to — the
// URLs to resolve and to call off, the callers told their URL was superseded, and what the queue
// is to do with the tracks found. `SessionMachine` asks it and carries its answers out.
//
// `intent` counts the commands that choose what plays: a play whose URL was still resolving when
// a newer such command came is called off, so the last click wins whatever order the resolves
// finish in.
import EngineAPI
import HTTPTypes
import ServiceSupport

struct ResolvingMachine: Sendable {
    private(set) var intent: UInt64 = 0
    private var lookups = Lookups()
    /// A playlist's entries still to queue after its first plays, by lookup.
    private var rest: [UInt64: [Track]] = [:]

    /// What the session carries out, in order.
    enum Effect: Sendable, Equatable {
        /// Resolves a lookup's URL (its resolution comes back to `resolved`).
        case resolve(lookup: UInt64, url: String)
        /// Calls a lookup off: the engine's work on it ends.
        case callOff(lookup: UInt64)
        /// A caller waiting for a lookup called off is told its URL was superseded.
        case superseded(request: UInt64, url: String)
        /// What clients see under `resolving` changed.
        case changed
    }

    /// Nothing is being resolved.
    var isEmpty: Bool { lookups.isEmpty }
    /// What the state shows under `resolving`.
    var pending: [PendingTrack] { lookups.pending }

    /// A command that chooses what plays: plays still resolving are called off (their place at
    /// the engine freed), since they would be dropped when they came back.
    mutating func choose() -> [Effect] {
        intent += 1
        return callOff { $0.isPlay }
    }

    /// Every lookup called off (the queue is cleared).
    mutating func callOffAll() -> [Effect] { callOff { _ in true } }

    /// A `play` (`isPlay`) or `queue` command's URL, for `request`: resolved in its turn. Refused
    /// when the session already waits for `Lookups.limit` of them.
    mutating func add(_ url: String, isPlay: Bool, request: UInt64) -> Result<[Effect], APIError> {
        guard !lookups.isFull else {
            return .failure(
                APIError(
                    status: .tooManyRequests, code: "too_many_pending",
                    message: "\(lookups.count) URLs of this session are still being resolved, the most it may have; "
                        + "wait for them before adding \(url)", retryAfterSeconds: 5))
        }
        _ = lookups.add(url: url, isPlay: isPlay, ticket: intent, request: request)
        return .success(startNext())
    }

    /// What a resolved lookup leads to.
    enum Resolved: Sendable {
        /// It was called off meanwhile: nothing.
        case gone
        /// Its command fails with this error.
        case failed(APIError)
        /// The queue is to take this input (its command's outcome settles the lookup).
        case queue(SessionQueue.Input)
    }

    /// The engine resolved lookup `number`'s URL (or could not); the queue has `room` for more
    /// tracks. The next lookup starts.
    mutating func resolved(_ number: UInt64, _ resolution: Result<Resolution, APIError>, room: Int, maxQueueLength: Int)
        -> (Resolved, [Effect])
    {
        guard let lookup = lookups.resolved(number) else { return (.gone, []) }
        let effects = startNext()
        let tracks: [Track]
        switch resolution {
        case .success(let resolved): tracks = resolved.tracks
        case .failure(let error): return (.failed(error), effects)
        }
        guard room > 0 else {
            return (
                .failed(
                    APIError(
                        status: .conflict, code: "queue_full",
                        message: "the queue holds \(maxQueueLength) tracks, the most it may; remove some before adding \(lookup.url)")),
                effects
            )
        }
        guard lookup.isPlay else {
            return (.queue(.enqueue(Array(tracks.prefix(room)), autoplay: lookup.ticket == intent)), effects)
        }
        guard lookup.ticket == intent, let first = tracks.first else { return (.failed(Self.superseded(lookup.url)), effects) }
        if tracks.count > 1 && room > 1 { rest[number] = Array(tracks.dropFirst().prefix(room - 1)) }
        return (.queue(.playNow(first)), effects)
    }

    /// What a lookup's carried-out command leads to.
    enum Settled: Sendable, Equatable {
        /// A playlist's first track plays: the rest are to be queued after it, as one command.
        case queueRest([Track])
        /// It is done: its URL, the request still waiting for it, and whether that request's
        /// caller was answered before (then a failure is told to every client).
        case done(url: String?, request: UInt64?, answeredEarly: Bool)
    }

    /// Lookup `number`'s command was carried out (`succeeded`) or refused.
    mutating func settle(_ number: UInt64, succeeded: Bool) -> Settled {
        if succeeded, let tracks = rest.removeValue(forKey: number) { return .queueRest(tracks) }
        rest[number] = nil
        let (lookup, request, early) = lookups.settle(number)
        return .done(url: lookup?.url, request: request, answeredEarly: early)
    }

    /// `request`'s caller is answered now, its URL still resolving: whether it was waiting for one.
    mutating func answerEarly(request: UInt64) -> Bool { lookups.answerEarly(request: request) != nil }

    private mutating func startNext() -> [Effect] {
        lookups.startNext().map { [.resolve(lookup: $0.number, url: $0.url)] } ?? []
    }

    /// Calls off the lookups `which` picks: their resolution is cancelled (the engine frees its
    /// place at once), and a caller still waiting is told `superseded`.
    private mutating func callOff(_ which: (Lookups.Lookup) -> Bool) -> [Effect] {
        let (gone, told) = lookups.callOff(which)
        guard !gone.isEmpty else { return [] }
        var effects: [Effect] = []
        for calledOff in gone {
            effects.append(.callOff(lookup: calledOff.lookup.number))
            if let request = calledOff.request { effects.append(.superseded(request: request, url: calledOff.lookup.url)) }
        }
        effects += startNext()
        if told { effects.append(.changed) }
        return effects
    }

    static func superseded(_ url: String) -> APIError {
        APIError(
            status: .conflict, code: "superseded",
            message: "another command changed what plays while \(url) was being resolved; it was not played")
    }
}
