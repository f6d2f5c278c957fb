// A change of volume, filters or normalisation renders the frames encoded ahead again: the stream
// that leaves is then exactly the one encoded had the change come before those frames.
import EngineAPI
import Foundation
import NIOConcurrencyHelpers
import ServiceSupport
import TestSupport
import WireProtocol
import Testing

@testable import AudioEngine

@Suite struct RenderAgainTests {
    /// One change, made while `lead` frames wait in the outbox; `before` is what played until then.
    struct Change: Sendable, CustomTestStringConvertible {
        let name: String
        var before = RenderSettings()
        let after: RenderSettings
        var testDescription: String { name }
    }

    static let changes = [
        Change(name: "volume", after: RenderSettings(volume: 30)),
        Change(
            name: "filters",
            after: RenderSettings(
                filters: Filters(equalizer: [EqualizerBand(band: 2, gain: 0.5)], tremolo: Tremolo(frequency: 4, depth: 0.5)))),
        Change(
            name: "normalisation off", before: RenderSettings(volume: 80, normalize: true),
            after: RenderSettings(volume: 80, normalize: false)),
    ]

    @Test(arguments: changes)
    func theFramesAheadAreRenderedAgainAsIfTheChangeHadComeFirst(_ change: Change) throws {
        try renderAgain(change, pacerTakes: 0)
    }

    /// The pacer takes the first waiting frame while the lead is being rendered again: the new
    /// frames no longer follow what was sent, and are made again from the state after it. Each
    /// time it does that, one more old frame is heard; after four tries the old frames stay and
    /// the change comes after them, never half of each.
    @Test(arguments: [1, 2, Playback.renderAgainAttempts])
    func aFrameSentDuringTheRenderIsFollowedByFramesRenderedAfterIt(pacerTakes: Int) throws {
        try renderAgain(Self.changes[0], pacerTakes: pacerTakes)
    }

    private func renderAgain(_ change: Change, pacerTakes: Int) throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.tone(440, seconds: 2, into: directory.path, sampleRate: 44_100)
        let source = ResolvedSource(location: file, displayName: "t")
        let lead = 6
        let sent = 10

        // What the pacer sends: `sent` frames, then the change with `lead` frames waiting.
        let playback = Playback(
            sessionID: try SessionID("again"), playID: 1, url: "t", startMS: 0, volume: change.before.volume,
            filters: change.before.filters, normalize: change.before.normalize, source: source)
        let pacer = OutboxPacer(playback, lead: lead)
        let (fill, send) = (pacer.fill, pacer.send)
        fill()
        while pacer.heard.count < sent {
            #expect(send())
            fill()
        }
        #expect(playback.machine.withLockedValue { $0.bufferedFrames } == lead)
        var taken = 0
        playback.afterRenderingAgain = {
            guard taken < pacerTakes else { return }
            taken += 1
            #expect(send())
        }
        playback.setVolume(change.after.volume)
        playback.setFilters(change.after.filters)
        playback.setNormalize(change.after.normalize)
        fill()
        #expect(taken == pacerTakes)
        playback.afterRenderingAgain = nil
        // Given up after the last attempt, the change comes after every frame that was waiting.
        let changedAt = pacerTakes == Playback.renderAgainAttempts ? sent + lead : sent + pacerTakes
        while send() { fill() }

        // The same track encoded with the change before frame `sent`.
        let pipeline = try Pipeline(source: source, encoder: OpusEncoderConfiguration())
        var expected: [[UInt8]] = []
        while true {
            let settings = expected.count < changedAt ? change.before : change.after
            guard case .value(let packet) = try pipeline.nextPacket(
                volume: settings.volume, filters: settings.filters, normalize: settings.normalize)
            else { break }
            expected.append(packet)
        }
        let heard = pacer.heard
        #expect(heard.count == expected.count)
        let differing = zip(heard, expected).enumerated().filter { $0.element.0 != $0.element.1 }.map(\.offset)
        #expect(differing.isEmpty, "frames \(differing.prefix(10)) differ from an encode with the change before frame \(changedAt)")

        // And the change is in what is heard from the next frame sent: the volume's level, the
        // filters' and normalisation's difference from the frame before.
        let decoder = try OpusDecoder()
        let levels = try heard.map { Spectrum.dBFS(try decoder.decode($0)) }
        if change.name == "volume" {
            // The ramp 100 % → 30 % spans frame `changedAt`; two frames on it is −10.5 dB.
            #expect(
                abs(levels[changedAt + 2] - levels[changedAt - 2] - 20 * log10(0.3)) < 0.5,
                "levels \(levels[(changedAt - 2)...(changedAt + 3)])")
        }
    }

    /// The governor deepens the engine's lead during a play (frames came late): the play keeps
    /// every frame it encodes ahead from then on, so a change with the deeper lead waiting is
    /// still heard from the next frame sent, as if it had come before those frames.
    @Test func aLeadDeepenedDuringThePlayIsRenderedAgainWhole() throws {
        let directory = try TemporaryDirectory()
        let file = try MediaFixture.tone(440, seconds: 2, into: directory.path, sampleRate: 44_100)
        let source = ResolvedSource(location: file, displayName: "t")
        let render = RenderContext(complexity: OpusEncoderConfiguration().complexity, lead: 2)
        let playback = Playback(
            sessionID: try SessionID("deeper"), playID: 1, url: "t", startMS: 0, volume: 100, filters: Filters(),
            normalize: false, source: source)
        let pacer = OutboxPacer(playback, lead: 2, render: render)
        pacer.perVisit = 2
        let sent = 10
        pacer.fill()
        while pacer.heard.count < 4 {
            #expect(pacer.send())
            pacer.fill()
        }
        // The deeper lead grows a frame a tick: each fill encodes the frame sent and one more.
        (pacer.lead, render.lead) = (8, 8)
        var buffered: [Int] = []
        while pacer.heard.count < sent {
            #expect(pacer.send())
            pacer.fill()
            buffered.append(playback.machine.withLockedValue { $0.bufferedFrames })
        }
        #expect(buffered == [3, 4, 5, 6, 7, 8])
        playback.setVolume(30)
        pacer.fill()
        while pacer.send() { pacer.fill() }

        let pipeline = try Pipeline(source: source, encoder: OpusEncoderConfiguration())
        var expected: [[UInt8]] = []
        while case .value(let packet) = try pipeline.nextPacket(volume: expected.count < sent ? 100 : 30, filters: Filters(), normalize: false) {
            expected.append(packet)
        }
        #expect(pacer.heard.count == expected.count)
        let differing = zip(pacer.heard, expected).enumerated().filter { $0.element.0 != $0.element.1 }.map(\.offset)
        #expect(differing.isEmpty, "frames \(differing.prefix(10)) differ from an encode with the change before frame \(sent)")
    }

    /// Packets passed through keep a deeper lead than frames encoded (they cost a few hundred
    /// bytes and no encoder state), refilled once half of it has gone; an encoded play keeps the
    /// lead it was given.
    @Test func aPlayPassedThroughKeepsADeeperLeadRefilledAtHalfOfIt() throws {
        let directory = try TemporaryDirectory()
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration=2", "-ac", "2", "-c:a", "libopus",
            "-b:a", "128k", "-frame_duration", "20", directory.file("tone.webm"),
        ])
        try MediaFixture.tone(440, seconds: 2, into: directory.path)
        func playing(_ name: String) throws -> Playback {
            let playback = Playback(
                sessionID: try SessionID("lead"), playID: 1, url: name, startMS: 0, volume: 100,
                source: ResolvedSource(location: directory.file(name), displayName: name))
            #expect(playback.claimFill(refillAt: Int.max))
            playback.fill(lead: 2, passthroughLead: 10, encoder: OpusEncoderConfiguration(), metrics: EngineMetrics(), network: nil)
            return playback
        }
        func buffered(_ playback: Playback) -> Int { playback.machine.withLockedValue { $0.bufferedFrames } }
        func take(_ playback: Playback) {
            while case .opened = playback.nextOutboxItem() {}
        }

        let passed = try playing("tone.webm")
        #expect(buffered(passed) == 10)
        // The pacer's threshold for a lead of 2 is 1; a passthrough play is refilled at 5.
        for _ in 0..<4 { take(passed) }
        #expect(buffered(passed) == 6)
        #expect(!passed.claimFill(refillAt: 1))
        take(passed)
        #expect(passed.claimFill(refillAt: 1))

        let encoded = try playing("tone-440.mp3")
        #expect(buffered(encoded) == 2)
        #expect(!encoded.claimFill(refillAt: 1))
        take(encoded)
        #expect(encoded.claimFill(refillAt: 1))
    }

    /// A change does not wait behind the tick's queue: it takes over a refill the tick claimed
    /// whose job has not started, renders the frames waiting again at once, and the tick's job,
    /// when its turn comes, leaves the play alone. A fill that has started cannot be taken over.
    @Test func aChangeTakesOverARefillTheTickQueuedButNotOneRunning() throws {
        let directory = try TemporaryDirectory()
        try MediaFixture.tone(440, seconds: 2, into: directory.path)
        let playback = Playback(
            sessionID: try SessionID("takeover"), playID: 1, url: "tone-440.mp3", startMS: 0, volume: 100,
            source: ResolvedSource(location: directory.file("tone-440.mp3"), displayName: "tone"))
        func fill(_ claim: UInt64?) {
            playback.fill(lead: 2, encoder: OpusEncoderConfiguration(), metrics: EngineMetrics(), network: nil, claim: claim)
        }
        func buffered() -> Int { playback.machine.withLockedValue { $0.bufferedFrames } }
        func frame() -> [UInt8]? {
            while let item = playback.nextOutboxItem() {
                if case .frame(let packet, _, _, _) = item { return packet }
            }
            return nil
        }
        fill(try #require(playback.claimFillNumber(refillAt: Int.max)))
        #expect(buffered() == 2)
        _ = frame()
        // The tick claims the refill; its job waits in the workers' queue.
        let queued = try #require(playback.claimFillNumber(refillAt: 1))
        #expect(playback.claimFillNumber(refillAt: Int.max) == nil)
        playback.setVolume(10)
        let takeover = try #require(playback.claimOrTakeOverFill())
        #expect(takeover != queued)
        fill(takeover)
        #expect(buffered() == 2)
        #expect(playback.machine.withLockedValue { !$0.filling && !$0.renderAgain })
        // The next tick claims again; then the old job's turn comes: it finds its claim gone,
        // encodes nothing and leaves the new claim standing for the new job.
        _ = frame()
        #expect(buffered() == 1)
        let next = try #require(playback.claimFillNumber(refillAt: 1))
        fill(queued)
        #expect(buffered() == 1)
        #expect(playback.machine.withLockedValue { $0.filling && !$0.fillRunning })
        fill(next)
        #expect(buffered() == 2)
        #expect(playback.machine.withLockedValue { !$0.filling })
        _ = frame()
        // The frames after the change are at the new volume: −20 dB against the first one heard.
        let decoder = try OpusDecoder()
        let quiet = try decoder.decode(try #require(frame()))
        #expect(Spectrum.dBFS(quiet) < -25, "\(Spectrum.dBFS(quiet)) dBFS")

        // A fill under way reads changes as it goes; it is not taken over.
        let running = try #require(playback.claimFillNumber(refillAt: Int.max))
        playback.machine.withLockedValue { $0.fillRunning = true }
        #expect(playback.claimOrTakeOverFill() == nil)
        playback.machine.withLockedValue { $0.fillRunning = false }
        fill(running)
        #expect(buffered() == 2)
    }

    /// An Opus source passed through untouched: the packets waiting (all but the first, which
    /// the pacer may be sending) are taken back, decoded and played through the renderer at the
    /// new volume — nothing lost, nothing played twice.
    @Test func untouchedPacketsWaitingAreTakenBackAndPlayedAtTheNewVolume() throws {
        let directory = try TemporaryDirectory()
        let file = directory.file("sweep.webm")
        // A sweep: 20 ms played twice or skipped would put the decoded wave out of step with the source's.
        let wave = "0.4*sin(2*PI*(200*t+300*t*t))"
        try MediaFixture.ffmpeg([
            "-f", "lavfi", "-i", "aevalsrc=\(wave)|\(wave):s=48000:d=2", "-c:a", "libopus", "-b:a", "128k",
            "-frame_duration", "20", file,
        ])
        let source = try MediaDecoder(path: file)
        var sourcePackets: [[UInt8]] = []
        while case .value(let packet) = try source.readPacket() { sourcePackets.append(packet.data) }

        let playback = Playback(
            sessionID: try SessionID("again"), playID: 1, url: "t", startMS: 0, volume: 100,
            source: ResolvedSource(location: file, displayName: "t"))
        let lead = 6
        let pacer = OutboxPacer(playback, lead: lead)
        let (fill, send) = (pacer.fill, pacer.send)
        fill()
        while pacer.heard.count < 10 {
            #expect(send())
            fill()
        }
        let waiting = { playback.machine.withLockedValue { box in box.items.compactMap { item -> Bool? in
            if case .frame(_, let passthrough, _, _) = item { return passthrough }
            return nil
        } } }
        #expect(waiting() == Array(repeating: true, count: lead))
        playback.setVolume(50)
        fill()
        // The first waiting packet stays; the rest are the renderer's now.
        #expect(waiting() == [true] + Array(repeating: false, count: lead - 1))
        #expect(playback.machine.withLockedValue { $0.renderAgain } == false)
        while send() { fill() }

        let heard = pacer.heard
        #expect(Array(heard.prefix(11)) == Array(sourcePackets.prefix(11)))
        #expect(abs(heard.count - sourcePackets.count) <= 1, "\(heard.count) frames for \(sourcePackets.count) source packets")
        let (heardPCM, sourcePCM) = (try OpusDecoder(), try OpusDecoder())
        let played = try heard.flatMap { try heardPCM.decode($0) }
        let original = try sourcePackets.flatMap { try sourcePCM.decode($0) }
        // From two frames after the change on: the source's wave at half the amplitude, later by
        // the new encoder's look-ahead (312 samples, 6.5 ms) and by nothing else.
        let from = 13 * OpusEncoder.frameFloats, to = 40 * OpusEncoder.frameFloats
        let halved = original[from..<to].map { $0 * 0.5 }
        func mismatch(_ lag: Int) -> (lag: Int, ratio: Double) {
            let difference = zip(played[(from + 2 * lag)..<(to + 2 * lag)], halved).map { $0 - $1 }
            return (lag, Spectrum.rms(difference) / Spectrum.rms(halved))
        }
        let coarse = stride(from: 0, through: 400, by: 8).map(mismatch).min { $0.ratio < $1.ratio }
        let near = try #require(coarse).lag
        let best = try #require((max(0, near - 8)...(near + 8)).map(mismatch).min { $0.ratio < $1.ratio })
        let (lag, ratio) = (best.lag, best.ratio)
        #expect(ratio < 0.2, "the played wave differs from the source's at half volume by \(ratio) of its level at best")
        #expect(abs(lag - 312) <= 2, "the played wave is \(lag) samples behind the source's")
    }
}

/// The worker's and the pacer's sides of one playback, in turn on the test's thread.
final class OutboxPacer {
    let playback: Playback
    var lead: Int
    /// The engine's render context, where a test gives one (its lead, as the governor sets it).
    let render: RenderContext?
    /// Frames one fill encodes at most once one is in hand (the engine's: a refill's and one more).
    var perVisit = Int.max
    /// What the pacer took, in order.
    private(set) var heard: [[UInt8]] = []

    init(_ playback: Playback, lead: Int, render: RenderContext? = nil) {
        self.playback = playback
        self.lead = lead
        self.render = render
    }

    /// Fills the outbox up to the lead (once the play has ended there is nothing left to fill).
    func fill() {
        guard playback.claimFill(refillAt: Int.max) else { return }
        playback.fill(
            lead: lead, encoder: OpusEncoderConfiguration(), metrics: EngineMetrics(), network: nil, render: render,
            perVisit: perVisit)
    }

    /// Takes the next item, as a tick does; false at the end or with nothing ready.
    func send() -> Bool {
        switch playback.nextOutboxItem() {
        case .frame(let packet, _, _, _):
            heard.append(packet)
            return true
        case .end, nil: return false
        case .opened, .handover, .previousEnded, .nextFailed, .layerStarted, .layerEnded: return true
        }
    }
}
