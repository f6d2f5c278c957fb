// Telling the engine which track follows the current play, as a value: what was asked last, and
// the loop that asks one at a time (so the engine gets the asks in order) and again when
// something changed while an ask was on its way. Part of `SessionMachine`; nothing here does I/O.

/// A session's asks for the next track.
struct NextAsk: Sendable, Equatable {
    /// The play the engine was asked to open ahead.
    struct Asked: Sendable, Equatable {
        /// The play it follows.
        var after: UInt64
        var playID: UInt64
        var url: String
        var crossfadeMS: Int
    }

    /// What to ask the engine: `url` (nil: call off the one asked before) to follow `after`.
    struct Ask: Sendable, Equatable {
        var after: UInt64
        var url: String?
        var crossfadeMS: Int
    }

    /// The last ask the engine answered with a play, until that play is heard or replaced.
    var asked: Asked?
    /// Asks sent whose answer has not come back.
    private(set) var inFlight = 0
    private var asking = false
    private var again = false
    /// Requests whose answer waits for the loop to end.
    private var waiters: [UInt64] = []

    /// The ask that brings the engine up to date, or nil when it is: nothing follows a session
    /// with no play, and an ask already answered the same is not repeated.
    func wanted(playID: UInt64?, active: Bool, upcoming: String?, crossfadeMS: Int) -> Ask? {
        guard let playID, active else { return nil }
        if let asked, asked.after == playID, asked.url == upcoming, asked.crossfadeMS == crossfadeMS { return nil }
        if upcoming == nil && asked?.after != playID { return nil }
        return Ask(after: playID, url: upcoming, crossfadeMS: crossfadeMS)
    }

    /// Starts the loop (true), or, with one under way, has it ask again once its ask is answered
    /// (false: `request`, if any, is not held up by it).
    mutating func start(for request: UInt64?) -> Bool {
        guard !asking else {
            again = true
            return false
        }
        asking = true
        waiters = request.map { [$0] } ?? []
        return true
    }

    /// A round of the loop begins.
    mutating func round() { again = false }

    mutating func sent() { inFlight += 1 }

    /// An ask was answered: `playID` is the play the engine opens ahead (nil: none).
    mutating func answered(_ ask: Ask, playID: UInt64?) {
        inFlight -= 1
        asked = nil
        if let playID, let url = ask.url {
            asked = Asked(after: ask.after, playID: playID, url: url, crossfadeMS: ask.crossfadeMS)
        }
    }

    /// After a round: whether to go round again; when not, the loop ends and answers the requests
    /// that waited for it.
    mutating func finishRound() -> (again: Bool, waiters: [UInt64]) {
        guard !again else { return (true, []) }
        asking = false
        defer { waiters = [] }
        return (false, waiters)
    }
}
