// Source → Opus packets for one play, on worker threads only. A source that is already Opus at
// 48 kHz stereo in single 20 ms frames goes out untouched while the volume is 100 %, no filter is
// set and loudness normalisation is off (or the track's tag says it is already at the target);
// any other source is decoded, resampled, normalised, filtered, scaled with a ramp and encoded.
import CoreMetrics
import EngineAPI
import Foundation
import ServiceSupport

/// The per-play chain: demux/decode (FFmpeg) → loudness → filters → gain → encode (libopus), or
/// passthrough.
final class Pipeline {
    /// A network source opens on its demux thread; until then there is no decoder.
    private enum Stage {
        case opening(SourceDemuxThread)
        case ready(MediaDecoder)
    }
    private var stage: Stage
    private let demuxThread: SourceDemuxThread?
    /// What the source holds, once it is open.
    private(set) var info: MediaInfo?
    private let startMS: Int64
    /// Loudness, filters, gain and the encoder (created at the first frame that needs encoding:
    /// a passthrough play never pays for one).
    private(set) var renderer: FrameRenderer
    /// The frame being made; sized at its first use (a passthrough play never makes one), as are
    /// the two buffers below.
    private var pcm: [Float] = []
    /// Present while a timescale is set: it takes source frames and gives output frames.
    private var timescale = TimescaleFeed()
    /// The source time the last packet covers, in microseconds: 20,000 but under a timescale.
    private(set) var lastSourceMicros = 20_000

    /// The track's own samples (decoded ahead, put back, an Opus source decoded on demand).
    private var samples: SourceSamples
    /// Whether the last packet went out untouched.
    private(set) var passthrough = false

    /// The next track, and how far the join with it is.
    private var join = TrackJoin()
    /// Where this track's sound ends and the next one's begins, with the session's `cue` on.
    private var cue = CueStage()
    /// The next track's side of a join: its leading silence skipped, in floats.
    var cueInFloats: Int64 { cue.inFloats }
    typealias Following = TrackJoin.Following
    /// Set while the play has a next track; fixed once the join has begun.
    var following: Following? { join.following }
    /// The next track's samples on their way into a joined frame.
    private var joinFrame: [Float] = []
    /// What the last packet holds of a join: the next track's first samples (`joinStarted`), the
    /// last of this track's (`joinCompleted`). Once completed, `handOver()` gives the next track's
    /// pipeline, which carries on with this one's renderer.
    var joinStarted: Bool { join.started }
    var joinCompleted: Bool { join.completed }

    /// Opens a file at once (and seeks to `startMS`); a network source starts opening on a thread
    /// of its own, and `open()` says when it is ready.
    init(
        source: ResolvedSource, encoder configuration: OpusEncoderConfiguration, startMS: Int64 = 0,
        loudnessTarget: Double = LoudnessNormalizer.defaultTarget, lead: Int = PlaybackConfiguration().leadFrames,
        metrics: EngineMetrics? = nil, network: SourceNetwork? = nil, render: RenderContext? = nil
    ) throws {
        renderer = FrameRenderer(
            encoder: configuration, loudnessTarget: loudnessTarget, keep: lead, encodeTime: metrics?.encodeTime, render: render)
        memory = render?.loudness
        trackKey = source.pageURL ?? source.location
        samples = SourceSamples(packetsSkipped: metrics?.sourcePacketsSkipped)
        self.startMS = startMS
        if source.isNetwork {
            guard let network else {
                throw APIError.unplayable(MediaError(kind: .openFailed, message: "network sources are not enabled"))
            }
            var settings = ReadAheadInput.Configuration()
            settings.headers = source.headers
            let reconnects = metrics?.sourceReconnects
            settings.onReconnect = { reconnects?.increment() }
            let thread = SourceDemuxThread(url: source.location, network: network, configuration: settings)
            demuxThread = thread
            stage = .opening(thread)
            return
        }
        demuxThread = nil
        let decoder: MediaDecoder
        do {
            decoder = try MediaDecoder(path: source.location)
        } catch {
            throw APIError.unplayable(error)
        }
        stage = .ready(decoder)
        try start(decoder)
    }

    deinit {
        demuxThread?.close()
        rememberLoudness(whole: false)
    }

    /// Where the loudness measured of this track is kept, and under which key (its page's URL,
    /// else its location).
    private let memory: LoudnessMemory?
    private let trackKey: String
    /// The track's loudness known before it plays: its tag's, else an earlier play's measurement.
    private(set) var knownLoudness: Double?
    /// The renderer measures another track now (this one ended, or handed over), or this one's
    /// measurement is kept already.
    private var measurementDone = false
    /// The play started past the beginning or sought: even played to its end, what was measured
    /// is part of the track.
    private var measuredPart = false

    /// Keeps what the renderer measured of this track for its later plays (once).
    private func rememberLoudness(whole: Bool) {
        guard !measurementDone, let memory else { return }
        measurementDone = true
        guard let measured = renderer.measuredLoudness else { return }
        memory.remember(trackKey, loudness: measured.loudness, seconds: measured.seconds, whole: whole && !measuredPart)
    }

    /// The source's description once it is open (seeked to `startMS`); nil while a network
    /// source is still opening. Throws if it could not be opened.
    func open() throws -> MediaInfo? {
        guard case .opening(let thread) = stage else { return info }
        switch thread.openResult {
        case nil:
            return nil
        case .failure(let error):
            throw APIError.unplayable(error)
        case .success(let opened):
            let decoder: MediaDecoder
            do {
                decoder = try MediaDecoder(info: opened.info, stream: opened.stream, source: thread)
            } catch {
                throw APIError.unplayable(error)
            }
            stage = .ready(decoder)
            try start(decoder)
            return info
        }
    }

    private func start(_ decoder: MediaDecoder) throws {
        info = decoder.info
        knownLoudness = decoder.info.taggedLoudness ?? memory?.loudness(for: trackKey)
        renderer.taggedLoudness = knownLoudness
        samples.opusSource = decoder.info.isOpusStereo48k
        if startMS > 0 { try seek(toMS: startMS) }
    }

    /// Whether the source is open and its samples can be read.
    var isReady: Bool {
        if case .ready = stage { return true }
        return false
    }

    /// Whether a join with the next track has begun (it can no longer be changed or called off).
    var isJoining: Bool { join.isJoining }

    /// Plays `next` after this track (nil: nothing follows). Ignored once the join has begun.
    func setFollowing(_ next: Following?) { join.follow(with: next) }

    /// The next track's pipeline, carrying on with this one's renderer (one encoder across the
    /// join, so nothing restarts there) and timescale. Call once the join completed, or after
    /// this track ended with the next one ready.
    func handOver() -> Pipeline? {
        guard let next = following?.pipeline else { return nil }
        next.renderer = renderer
        rememberLoudness(whole: true)
        renderer.startTrack(taggedLoudness: next.knownLoudness)
        next.timescale.carry(from: timescale)
        next.lastSourceMicros = lastSourceMicros
        join.handedOver()
        return next
    }

    var readAhead: ReadAheadInput.Stats? { demuxThread?.readAhead }

    /// The next 20 ms Opus packet at `volume` percent through `filters`, brought to the target
    /// loudness if `normalize`, with the play's `layers` mixed in.
    func nextPacket(
        volume: Int, filters: Filters = Filters(), normalize: Bool = false, layers: LayerMixer? = nil, cue: Bool = false
    ) throws -> Next<[UInt8]> {
        self.cue.enabled = cue
        let next = try renderNext(volume: volume, filters: filters, normalize: normalize, layers: layers)
        if case .end = next { rememberLoudness(whole: true) }
        return next
    }

    private func renderNext(volume: Int, filters: Filters, normalize: Bool, layers: LayerMixer?) throws -> Next<[UInt8]> {
        guard case .ready(let decoder) = stage else { return .pending }
        let settings = RenderSettings(volume: volume, filters: filters, normalize: normalize)
        if let released = timescale.set(filters.timescale) { samples.putBack(released) }
        renderer.apply(settings)
        join.newPacket()
        do {
            if samples.opusSource && renderer.leavesUnchanged(volume: volume) && samples.decoded.isEmpty
                && !timescale.isActive && !join.isJoining && !fadeBegins && layers?.isSounding != true
                && !(cue.enabled && inTailWindow)
            {
                let packet: CompressedPacket
                switch try samples.nextPacket(decoder) {
                case .end: return .end
                case .pending: return .pending
                case .value(let next): packet = next
                }
                if OpusPacket.isSingle20msFrame(packet.data) {
                    samples.passedThrough(packet.data)
                    passthrough = true
                    renderer.passedThrough()
                    lastSourceMicros = 20_000
                    return .value(packet.data)
                }
                try samples.decode(packet.data)
            }
            if timescale.isActive {
                switch try timescale.frame(into: &pcm, source: { try heardFrame(decoder, into: &$0) }) {
                case .end: return .end
                case .pending: return .pending
                case .value(let micros): lastSourceMicros = micros
                }
            } else {
                switch try heardFrame(decoder, into: &pcm) {
                case .end: return .end
                case .pending: return .pending
                case .value: lastSourceMicros = 20_000
                }
            }
        } catch let error as MediaError {
            throw APIError.unplayable(error)
        }
        passthrough = false
        guard let layers, !layers.isEmpty else {
            // After the last layer, the track comes back at its release.
            var after = layers?.overlay ?? .none
            after.sounding = false
            return .value(try pcm.withUnsafeBufferPointer { try renderer.render($0, overlay: after, settings: settings) })
        }
        // A track with layers is not measured as a whole: what was heard was not the track alone.
        measuredPart = true
        let overlay = layers.mixNextFrame()
        return .value(
            try pcm.withUnsafeBufferPointer { track in
                try layers.frame.withUnsafeBufferPointer { layer in
                    try renderer.render(track, layer: overlay.sounding ? layer : nil, overlay: overlay, settings: settings)
                }
            })
    }

    /// The next 20 ms of what is heard: this track's, and at its end the next track's, joined on
    /// the sample or mixed over the fade.
    private func heardFrame(_ decoder: MediaDecoder, into frame: inout [Float]) throws -> Next<Void> {
        let needed = OpusEncoder.frameFloats
        if frame.count != needed { frame = [Float](repeating: 0, count: needed) }
        guard let next = following?.pipeline, next.isReady else {
            switch try samples.readFrame(decoder, into: &frame) {
            case .value: return .value(())
            case .end: return .end
            case .pending: return .pending
            }
        }
        if joinFrame.count != needed { joinFrame = [Float](repeating: 0, count: needed) }
        if cue.enabled && !join.isJoining {
            try cue.lookAtTail(&samples, decoder, durationMS: info?.durationMS, fadeFloats: following?.fadeFloats ?? 0)
        }
        if fadeBegins { join.beginFade() }
        if join.isJoining {
            // The next track's frame first: if it is not there yet, none of this one's is taken.
            switch try next.readOwnFrame(into: &joinFrame, skipLeadingSilence: cue.enabled) {
            case .pending: return .pending
            case .end: joinFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            case .value: break
            }
            switch try samples.readFrame(decoder, into: &frame) {
            case .pending:
                next.unread(joinFrame[...])
                return .pending
            case .end: frame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            case .value: break
            }
            join.mix(&frame, with: joinFrame)
            return .value(())
        }
        var valid: Int
        let before = samples.position
        switch try samples.readFrame(decoder, into: &frame) {
        case .pending: return .pending
        case .end: valid = 0
        case .value(let count): valid = count
        }
        let heard = cue.heard(valid, from: before)
        if heard < valid {
            // Past the cue-out: the rest of this track is its silence, and is not heard.
            valid = heard
            frame.withUnsafeMutableBufferPointer { $0[valid...].update(repeating: 0) }
        }
        guard valid < needed else { return .value(()) }
        // This track ends within the frame: the next one's first samples fill the rest of it.
        switch try next.readOwnFrame(into: &joinFrame, skipLeadingSilence: cue.enabled) {
        case .pending:
            // The next track's network is behind: the frame keeps its silence, and the join
            // happens at the next frame.
            return valid > 0 ? .value(()) : .pending
        case .end: joinFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
        case .value: break
        }
        frame.withUnsafeMutableBufferPointer { out in
            joinFrame.withUnsafeBufferPointer { from in
                guard let to = out.baseAddress, let source = from.baseAddress else { return }
                (to + valid).update(from: source, count: needed - valid)
            }
        }
        next.unread(joinFrame[(needed - valid)...])
        join.joinOnTheSample()
        return .value(())
    }

    /// Whether the fade into the next track starts with the next frame.
    private var fadeBegins: Bool {
        join.fadeBegins(position: samples.position, durationMS: info?.durationMS, end: cue.enabled ? cue.outFloats : nil)
    }

    /// This track has a next one and is within (fade + 10 s + 2 s) of its end (`CueStage`).
    private var inTailWindow: Bool {
        CueStage.inTailWindow(position: samples.position, durationMS: info?.durationMS, fadeFloats: following?.fadeFloats)
    }

    /// The next 20 ms of this track's own samples (the next track's side of a join, a layer's).
    /// `skipLeadingSilence`: first, the track's silence before its cue-in is read and dropped
    /// (at most 10 s of it); the frame starts at the first 10 ms of sound.
    func readOwnFrame(into frame: inout [Float], skipLeadingSilence: Bool = false) throws -> Next<Int> {
        guard case .ready(let decoder) = stage else { return .pending }
        if skipLeadingSilence { return try cue.readAfterLeadingSilence(&samples, decoder, into: &frame) }
        return try samples.readFrame(decoder, into: &frame)
    }

    /// Samples read but not used go back in front of the source.
    private func unread(_ read: ArraySlice<Float>) { samples.unread(read) }

    /// Whether frames go out as the source's own packets with these settings: an Opus source,
    /// and nothing that changes the sound (normalisation counts only if the track's tag is off
    /// the target).
    func passesThrough(volume: Int, filters: Filters, normalize: Bool) -> Bool {
        guard let info else { return false }
        return info.isOpusStereo48k && volume == 100 && filters.isEmpty
            && !(normalize && LoudnessNormalizer.isNeeded(taggedLoudness: knownLoudness, target: renderer.loudnessTarget))
    }

    /// Source packets that went out untouched but will not be sent after all (the settings
    /// changed while they waited): decoded, they go back in front of the source, to be played
    /// through the renderer. `previous` is the packet the listener hears just before them; the
    /// decoder is primed with it so the first decoded frame continues it.
    func takeBack(_ packets: [[UInt8]], after previous: [UInt8]) throws {
        try samples.takeBack(packets, after: previous)
        passthrough = false
    }

    /// Moves to `positionMS`; the next packet is the frame that starts there.
    func seek(toMS positionMS: Int64) throws {
        guard case .ready(let decoder) = stage else { return }
        measuredPart = true
        do {
            try decoder.seek(toMS: positionMS)
        } catch {
            throw APIError.unplayable(error)
        }
        samples.seeked(toMS: positionMS)
        renderer.forget()
        timescale.seeked()
    }
}
