// The `play` and `queue` commands of one session whose URL is on its way through the engine's
// `/resolve`, as a value: which one resolves now (one at a time: the engine lets a session hold
// one place for resolving, and the queue then grows in the order the commands came; a play goes
// before the queued URLs waiting), which caller still waits for its answer, and which were called
// off. Part of `SessionMachine`; nothing here does I/O.

/// A session's URLs being resolved.
struct Lookups: Sendable, Equatable {
    /// One command's URL.
    struct Lookup: Sendable, Equatable {
        let number: UInt64
        let url: String
        let isPlay: Bool
        /// The session's `intent` when the command came (a play older than the last is dropped).
        let ticket: UInt64
    }

    /// The most a session may have waiting.
    static let limit = 32

    /// Waiting, oldest first except that plays go before queued URLs; the first resolves when
    /// `running` names it.
    private var waiting: [Lookup] = []
    private var running: UInt64?
    private var made: UInt64 = 0
    /// Lookup → the request whose caller still waits for it (resolving, or carried out now).
    private var callers: [UInt64: UInt64] = [:]
    /// Lookups whose caller was answered before they ended: their end is told to every client.
    private var answeredEarly: Set<UInt64> = []
    /// Resolved lookups whose command is being carried out.
    private var carried: [UInt64: Lookup] = [:]

    var isEmpty: Bool { waiting.isEmpty }
    var isFull: Bool { waiting.count >= Self.limit }
    var count: Int { waiting.count }

    /// What the state shows under `resolving`.
    var pending: [PendingTrack] { waiting.map { PendingTrack(url: $0.url, command: $0.isPlay ? "play" : "queue") } }

    /// Adds a command's URL; answers the lookup.
    mutating func add(url: String, isPlay: Bool, ticket: UInt64, request: UInt64) -> Lookup {
        made += 1
        let lookup = Lookup(number: made, url: url, isPlay: isPlay, ticket: ticket)
        // A play goes before the queued URLs still waiting (not before the one resolving now).
        let first = running == nil ? 0 : 1
        if isPlay, let index = waiting.indices.dropFirst(first).first(where: { !waiting[$0].isPlay }) {
            waiting.insert(lookup, at: index)
        } else {
            waiting.append(lookup)
        }
        callers[lookup.number] = request
        return lookup
    }

    /// The lookup to resolve now, if none is resolving.
    mutating func startNext() -> Lookup? {
        guard running == nil, let next = waiting.first else { return nil }
        running = next.number
        return next
    }

    /// Lookup `number` came back from the engine: it leaves the waiting ones (nil if it was called
    /// off meanwhile, its outcome decided then).
    mutating func resolved(_ number: UInt64) -> Lookup? {
        guard running == number, let index = waiting.firstIndex(where: { $0.number == number }) else { return nil }
        running = nil
        let lookup = waiting.remove(at: index)
        carried[number] = lookup
        return lookup
    }

    /// A lookup called off, with the request still waiting for it, if any.
    struct CalledOff: Sendable, Equatable {
        let lookup: Lookup
        let request: UInt64?
    }

    /// Calls off the waiting lookups `which` picks; answers them and whether a client had been
    /// told of any (its `resolving` changes).
    mutating func callOff(_ which: (Lookup) -> Bool) -> (gone: [CalledOff], told: Bool) {
        let gone = waiting.filter(which)
        waiting.removeAll(where: which)
        var told = false
        let calledOff = gone.map { lookup in
            if running == lookup.number { running = nil }
            if answeredEarly.remove(lookup.number) != nil { told = true }
            return CalledOff(lookup: lookup, request: callers.removeValue(forKey: lookup.number))
        }
        return (calledOff, told)
    }

    /// The caller of `request` is answered now, its URL still resolving (or being carried out):
    /// answers the lookup, if `request` was waiting for one.
    mutating func answerEarly(request: UInt64) -> UInt64? {
        guard let number = callers.first(where: { $0.value == request })?.key else { return nil }
        callers[number] = nil
        answeredEarly.insert(number)
        return number
    }

    /// Lookup `number`'s command is carried out (or refused): the lookup, the request still
    /// waiting for it, and whether its caller was answered before.
    mutating func settle(_ number: UInt64) -> (lookup: Lookup?, request: UInt64?, answeredEarly: Bool) {
        (carried.removeValue(forKey: number), callers.removeValue(forKey: number), answeredEarly.remove(number) != nil)
    }
}
