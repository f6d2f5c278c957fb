// The sessions' HLS streams (`/hls/{id}/index.m3u8`): one segmenter per session somebody listens
// to over HLS, fed by one subscription to the session like one more listener, so segments are cut
// once whatever the number of HLS listeners; every request is answered from memory. A session's
// segmenter stops when nobody has asked for its playlist for `idleAfter`.
import Foundation
import NIOCore
import Synchronization
import WireProtocol

final class HLSOutput: Sendable {
    private struct Entry {
        var stream = HLSStream()
        let created = ContinuousClock.now
        var lastRequest = ContinuousClock.now
        var lastPacket: ContinuousClock.Instant?
        var subscription: Subscription?
        /// The playlist as last rendered for each query (a token) at `renderedRevision`: most
        /// listeners of a station share one token, so nearly every request is a lookup.
        var rendered: [String: String] = [:]
        var renderedRevision: UInt64 = 0
        /// The play whose `ready` came last: an older play's `finished` is a gapless join's or a
        /// crossfade's (it comes once the old track's last samples are out, after the new one's
        /// first packet), not a gap.
        var playing: UInt64?

        /// The playlist for `query`, rendered at most once per change of the stream.
        mutating func playlist(query: String) -> String {
            if renderedRevision != stream.revision {
                rendered.removeAll(keepingCapacity: true)
                renderedRevision = stream.revision
            }
            if let text = rendered[query] { return text }
            let text = stream.playlist(query: query)
            if rendered.count < 64 { rendered[query] = text }
            return text
        }
    }

    private let entries = Mutex<[SessionID: Entry]>([:])
    private let lastSweep = Mutex(ContinuousClock.now)
    let store: SessionStore
    /// A segmenter nobody asked for in this long stops.
    let idleAfter: Duration
    /// A session silent this long ends its playlist (`EXT-X-ENDLIST`) until it plays again.
    let endAfter: Duration

    init(store: SessionStore, idleAfter: Duration = .seconds(60), endAfter: Duration = .seconds(10)) {
        self.store = store
        self.idleAfter = idleAfter
        self.endAfter = endAfter
    }

    /// `id`'s playlist, its URIs carrying `query` (a listener's token). Starts the session's
    /// segmenter if it is not running and, while the session plays, waits up to `wait` for it to
    /// hold `startSegments`: a player starts three target durations from a live playlist's end
    /// (RFC 8216 §6.3.3), and Chromium's own HLS refuses a live playlist shorter than that.
    func playlist(_ id: SessionID, query: String, wait: Duration = .seconds(8)) async -> String {
        let started = ContinuousClock.now
        startIfNeeded(id)
        sweep()
        while ContinuousClock.now - started < wait, entries.withLock({ $0[id].map(Self.filling) ?? false }) {
            try? await Task.sleep(for: .milliseconds(50))
        }
        return current(id, query: query) ?? HLSStream().playlist(query: query)
    }

    /// `id`'s playlist if its segmenter runs and has cut its first segments (or cannot, being
    /// silent): what nearly every request gets, without a look at the session itself.
    func ready(_ id: SessionID, query: String) -> String? {
        guard entries.withLock({ $0[id].map { !Self.filling($0) } ?? false }) else { return nil }
        sweep()
        return current(id, query: query)
    }

    private func current(_ id: SessionID, query: String) -> String? {
        entries.withLock { entries in
            guard entries[id] != nil else { return nil }
            entries[id]?.lastRequest = .now
            if let last = entries[id]?.lastPacket, ContinuousClock.now - last > endAfter, entries[id]?.stream.ended == false {
                entries[id]?.stream.end()
            }
            return entries[id]?.playlist(query: query)
        }
    }

    /// Segments a new segmenter cuts before its playlist is answered.
    static let startSegments = 3

    /// Whether a segmenter is still cutting its first segments: fewer than `startSegments`, and a
    /// packet within the last half second (or none yet, in its first second).
    private static func filling(_ entry: Entry) -> Bool {
        guard entry.stream.segments.count < startSegments, !entry.stream.ended else { return false }
        let now = ContinuousClock.now
        if let last = entry.lastPacket { return now - last < .milliseconds(500) }
        return now - entry.created < .seconds(1)
    }

    /// Segment `sequence` of `id`, while it is kept.
    func segment(_ id: SessionID, sequence: UInt32) -> ByteBuffer? {
        entries.withLock { $0[id]?.stream.segment(sequence) }
    }

    /// How many sessions have a segmenter running (metrics, tests).
    var running: Int { entries.withLock { $0.count } }

    private func startIfNeeded(_ id: SessionID) {
        let subscription: Subscription? = entries.withLock { entries in
            guard entries[id] == nil else { return nil }
            let subscription = store.subscribe(id, kind: .hls)
            var entry = Entry(subscription: subscription)
            // Started mid-track: the track playing is named from the first packet cut.
            if let playing = store.findBySessionId(id)?.lastTrackStart {
                entry.stream.trackStarted(title: playing.title, artist: playing.artist)
            }
            entries[id] = entry
            return subscription
        }
        guard let subscription else { return }
        Task { [weak self] in
            for await message in subscription.messages {
                guard let self else { return }
                self.take(message, for: id)
            }
        }
    }

    /// One message of `id`'s subscription (tests feed it directly).
    func take(_ message: ClientMessage, for id: SessionID) {
        let nowMS = Int64((Date().timeIntervalSince1970 * 1000).rounded())
        entries.withLock { entries in
            guard entries[id] != nil else { return }
            switch message {
            case .audio(let packet):
                entries[id]?.stream.append(packet, nowMS: nowMS)
                entries[id]?.lastPacket = .now
            case .event(let line):
                guard let event = Self.event(line) else { return }
                switch event.type {
                case .ready:
                    entries[id]?.playing = event.playID
                    entries[id]?.stream.trackStarted(title: event.title, artist: event.artist)
                case .finished:
                    if let ended = event.playID, let playing = entries[id]?.playing, ended != playing { return }
                    entries[id]?.stream.gap()
                case .paused: entries[id]?.stream.gap()
                default: break
                }
            }
        }
    }

    /// Stops the segmenters nobody asked for lately (looked at once a second at most).
    private func sweep() {
        let due = lastSweep.withLock { last in
            guard ContinuousClock.now - last >= .seconds(1) else { return false }
            last = .now
            return true
        }
        guard due else { return }
        let idle = entries.withLock { entries -> [Subscription] in
            let stale = entries.filter { ContinuousClock.now - $0.value.lastRequest > idleAfter }
            for id in stale.keys { entries.removeValue(forKey: id) }
            return stale.values.compactMap(\.subscription)
        }
        for subscription in idle { store.unsubscribe(subscription.sessionID, token: subscription.token) }
    }

    /// The events a segmenter reads (a track's start, a pause, an end); other lines are not parsed.
    private static func event(_ line: String) -> WireEvent? {
        guard line.contains(#""type":"ready""#) || line.contains(#""type":"paused""#) || line.contains(#""type":"finished""#)
        else { return nil }
        return try? WireEvent(jsonLine: Array(line.utf8))
    }
}
