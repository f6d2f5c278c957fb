// One session's queue as a value: tracks, the current index, loop mode, volume, and the
// generation that makes it race-free. Every user action that changes what plays, and every
// auto-advance, starts a new generation; a result that arrives for an older generation (a late
// `ready`, a late `finished`, a resolve that completed after the user moved on) is dropped.
// Inputs return the action the Router carries out; nothing here does I/O.
import ServiceSupport

/// A track in a queue.
struct Track: Sendable, Equatable, Codable {
    var url: String
    var title: String?
    var durationMS: Int64?
    var thumbnail: String?

    init(url: String, title: String? = nil, durationMS: Int64? = nil, thumbnail: String? = nil) {
        self.url = url
        self.title = title
        self.durationMS = durationMS
        self.thumbnail = thumbnail
    }

    enum CodingKeys: String, CodingKey {
        case url, title, thumbnail
        case durationMS = "duration_ms"
    }
}

/// What happens when a track ends.
enum LoopMode: String, Sendable, Codable, CaseIterable {
    /// Advance; stop after the last track.
    case off
    /// Play the same track again.
    case track
    /// Advance; after the last track start over at the first.
    case queue
}

/// The queue of one session and the rules for changing it.
struct SessionQueue: Sendable, Equatable, Codable {
    enum Status: Sendable, Equatable, Codable {
        case idle
        /// Asked the engine to play the current track for this generation; no `ready` yet.
        case starting
        case playing
        case paused
    }

    enum Input: Equatable {
        case playNow(Track)
        /// Appends tracks; an idle queue starts the first of them unless `autoplay` is false (the
        /// user did something else while they were being resolved).
        case enqueue([Track], autoplay: Bool = true)
        case remove(index: Int)
        case clear
        case jump(index: Int)
        case next
        /// `positionMS` is where the current track is; past 3 s `previous` restarts it.
        case previous(positionMS: Int64)
        case stop
        /// Asks for a pause; the queue is paused once the engine has done it (`paused`).
        case pause
        /// Resumes a paused play (the queue plays again once the engine has: `resumed`), or plays
        /// the current track again from where it was after a stop or a restart.
        case resume
        /// The engine paused the play of `generation`.
        case paused(generation: UInt64)
        /// The engine resumed the play of `generation`.
        case resumed(generation: UInt64)
        case setLoop(LoopMode)
        /// Shuffles the tracks after the current one with the given permutation source.
        case shuffle(seed: UInt64)
        /// The engine's play for `generation` is ready; its title and duration fill in what the
        /// track did not know.
        case ready(generation: UInt64, title: String? = nil, durationMS: Int64? = nil)
        /// The engine's play for `generation` ended.
        case finished(generation: UInt64, reason: EndReason)
    }

    /// The part of the engine's `finished` reason that matters to a queue.
    enum EndReason: Equatable {
        /// The track played to its end: advance according to the loop mode.
        case finished
        /// The track failed: tell the clients, then move on so one bad track does not stall.
        case error
        /// Stopped, replaced or cleaned up: never advance.
        case other
    }

    enum Action: Equatable {
        /// Ask the engine to play `track` for `generation` (it replaces whatever plays), from the
        /// start or, when `resuming`, from where the track was.
        case play(Track, generation: UInt64, resuming: Bool = false)
        /// Ask the engine to stop the session.
        case stop
        /// Ask the engine to pause (resume) the play of `generation`; its answer is the next input.
        case pause(generation: UInt64)
        case resume(generation: UInt64)
        /// Only the stored queue changed (tell clients, persist).
        case updated
        /// An input from an older generation, or one that changes nothing.
        case none
        /// The input is not allowed now: 409 (or 400 for a bad index) with this reason.
        case refuse(Refusal)
    }

    enum Refusal: Equatable {
        case badIndex(String)
        case invalidState(String)
    }

    private(set) var tracks: [Track] = []
    /// Index of the current track, if any.
    private(set) var current: Int?
    private(set) var loop: LoopMode = .off
    private(set) var generation: UInt64 = 0
    private(set) var status: Status = .idle
    /// Tracks that failed in a row; when every track has failed the queue stops instead of
    /// cycling through errors for ever.
    private(set) var failuresInARow = 0

    /// `status` is stored under its first name, so queues saved before the rename still load.
    enum CodingKeys: String, CodingKey {
        case tracks, current, loop, generation, failuresInARow
        case status = "playback"
    }

    init() {}

    var currentTrack: Track? { current.map { tracks[$0] } }

    mutating func handle(_ input: Input) -> Action {
        switch input {
        case .playNow(let track):
            // Play now inserts after the current track (or at the end) and plays it.
            let index = current.map { $0 + 1 } ?? tracks.count
            tracks.insert(track, at: index)
            return start(at: index)

        case .enqueue(let added, let autoplay):
            guard !added.isEmpty else { return .none }
            tracks.append(contentsOf: added)
            // An idle queue starts playing what was added.
            if status == .idle && autoplay { return start(at: tracks.count - added.count) }
            return .updated

        case .remove(let index):
            guard tracks.indices.contains(index) else { return .refuse(.badIndex(Self.range(index, tracks.count))) }
            tracks.remove(at: index)
            guard let playing = current else { return .updated }
            if index < playing {
                current = playing - 1
                return .updated
            }
            if index > playing { return .updated }
            // The current track was removed: play what took its place, or stop at the end.
            if tracks.indices.contains(index) { return start(at: index) }
            return stopAll(keepIndex: false)

        case .clear:
            tracks.removeAll()
            return stopAll(keepIndex: false)

        case .jump(let index):
            guard tracks.indices.contains(index) else { return .refuse(.badIndex(Self.range(index, tracks.count))) }
            return start(at: index)

        case .next:
            guard let playing = current else {
                return tracks.isEmpty ? .refuse(.invalidState("the queue is empty")) : start(at: 0)
            }
            if playing + 1 < tracks.count { return start(at: playing + 1) }
            if loop == .queue { return start(at: 0) }
            return .refuse(.invalidState("this is the last track; add more or set loop to \"queue\""))

        case .previous(let position):
            guard let playing = current else { return .refuse(.invalidState("nothing is playing")) }
            // More than 3 s in: start this track again, as every player does.
            if position > 3_000 { return start(at: playing) }
            if playing > 0 { return start(at: playing - 1) }
            // At the first track: wrap around when looping the queue, else restart it.
            return start(at: loop == .queue ? tracks.count - 1 : playing)

        case .stop:
            guard status != .idle else { return .none }
            return stopAll(keepIndex: true)

        case .pause:
            guard status == .playing else {
                return .refuse(.invalidState(status == .paused ? "already paused" : "nothing is playing"))
            }
            return .pause(generation: generation)

        case .resume:
            if status == .idle, let stopped = current { return start(at: stopped, resuming: true) }
            guard status == .paused else {
                return .refuse(.invalidState(status == .playing ? "already playing" : "nothing is paused"))
            }
            return .resume(generation: generation)

        case .paused(let generation):
            guard generation == self.generation, status == .playing else { return .none }
            status = .paused
            return .updated

        case .resumed(let generation):
            guard generation == self.generation, status == .paused else { return .none }
            status = .playing
            return .updated

        case .setLoop(let mode):
            loop = mode
            return .updated

        case .shuffle(let seed):
            let start = (current ?? -1) + 1
            guard tracks.count - start > 1 else { return .none }
            var generator = SplitMix64(seed: seed)
            tracks[start...].shuffle(using: &generator)
            return .updated

        case .ready(let generation, let title, let durationMS):
            guard generation == self.generation, status == .starting, let playing = current else { return .none }
            status = .playing
            failuresInARow = 0
            if tracks[playing].title == nil { tracks[playing].title = title }
            if tracks[playing].durationMS == nil { tracks[playing].durationMS = durationMS }
            return .updated

        case .finished(let generation, let reason):
            guard generation == self.generation, status != .idle, let playing = current else { return .none }
            switch reason {
            case .other:
                status = .idle
                return .updated
            case .finished, .error:
                if reason == .error {
                    failuresInARow += 1
                    if failuresInARow >= tracks.count { return stopAll(keepIndex: true, tellEngine: false) }
                }
                // Loop a track only when it played; a failing track moves on instead of repeating.
                if reason == .finished && loop == .track { return start(at: playing) }
                if playing + 1 < tracks.count { return start(at: playing + 1) }
                if loop == .queue && !tracks.isEmpty { return start(at: 0) }
                return stopAll(keepIndex: true, tellEngine: false)
            }
        }
    }

    /// The play went with the pair that ran it (a cluster's failover or migration): the queue
    /// stands at the same track, stopped; answers whether it was playing, so the new owner
    /// resumes it (`resume` from a stopped queue plays the current track from the stored position).
    /// A paused queue stays stopped at its position, and `resume` continues it.
    mutating func playLost() -> Bool {
        let wasPlaying = status == .playing || status == .starting
        if status != .idle { status = .idle }
        return wasPlaying && current != nil
    }

    /// The track the queue moves to when the current one plays to its end (the engine opens it
    /// ahead, for a gapless join or a crossfade); nil when the queue would stop there.
    var upcoming: Track? {
        guard status == .playing || status == .paused, let playing = current, tracks.indices.contains(playing) else {
            return nil
        }
        if loop == .track { return tracks[playing] }
        if playing + 1 < tracks.count { return tracks[playing + 1] }
        if loop == .queue { return tracks[0] }
        return nil
    }

    /// Makes `index` current and asks for it in a new generation.
    private mutating func start(at index: Int, resuming: Bool = false) -> Action {
        current = index
        generation += 1
        status = .starting
        return .play(tracks[index], generation: generation, resuming: resuming)
    }

    private mutating func stopAll(keepIndex: Bool, tellEngine: Bool = true) -> Action {
        let wasActive = status != .idle
        generation += 1
        status = .idle
        if !keepIndex || (current.map { !tracks.indices.contains($0) } ?? false) { current = nil }
        return wasActive && tellEngine ? .stop : .updated
    }

    private static func range(_ index: Int, _ count: Int) -> String {
        count == 0
            ? "index \(index) does not exist: the queue is empty"
            : "index \(index) does not exist: the queue has positions 0 to \(count - 1)"
    }
}
