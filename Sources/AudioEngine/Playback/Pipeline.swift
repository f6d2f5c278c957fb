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
    private var timescale: TimescaleStage?
    /// A source frame on its way into the timescale stage.
    private var sourceFrame: [Float] = []
    /// The source ended under a timescale: silence goes in until the stage has played what it took.
    private var sourceEnded = false
    /// The source time the last packet covers, in microseconds: 20,000 but under a timescale.
    private(set) var lastSourceMicros = 20_000

    // Opus sources: the libopus decoder used while transcoding.
    private var opusSource = false
    private var opusDecoder: OpusDecoder?
    /// Decoded source samples waiting to be played: an Opus source's packets decode into it, and a
    /// timescale turned off hands back what it took but did not play. Played before the source.
    private var decoded: [Float] = []
    private var scratch: [Float] = []
    private var previousPacket: [UInt8]?
    /// After a seek: compressed packets that start before this are skipped.
    private var skipPacketsBeforeMS: Int64?
    /// Whether the last packet went out untouched.
    private(set) var passthrough = false
    /// Interleaved floats of the source read since its start: where the track is, in samples.
    private var sourcePosition: Int64 = 0

    /// The track that plays after this one, opened ahead, and how the two join.
    struct Following {
        let playID: UInt64
        let pipeline: Pipeline
        /// Interleaved floats over which the two are mixed; 0 joins them on the sample.
        let fadeFloats: Int
    }
    /// Set while the play has a next track; fixed once the join has begun.
    private(set) var following: Following?
    /// The join in progress: floats of the fade done, of how many.
    private var fade: (done: Int, total: Int)?
    /// The next track's samples on their way into a joined frame.
    private var joinFrame: [Float] = []
    /// What the last packet holds of a join: the next track's first samples (`joinStarted`), the
    /// last of this track's (`joinCompleted`). Once completed, `handOver()` gives the next track's
    /// pipeline, which carries on with this one's renderer.
    private(set) var joinStarted = false
    private(set) var joinCompleted = false

    private let packetsSkipped: CoreMetrics.Counter?
    /// Invalid packets in a row; this many (a second's worth) end the play as corrupt.
    private var invalidInARow = 0
    static let invalidPacketsLimit = 50

    /// Opens a file at once (and seeks to `startMS`); a network source starts opening on a thread
    /// of its own, and `open()` says when it is ready.
    init(
        source: ResolvedSource, encoder configuration: OpusEncoderConfiguration, startMS: Int64 = 0,
        loudnessTarget: Double = LoudnessNormalizer.defaultTarget, lead: Int = PlaybackConfiguration().leadFrames,
        metrics: EngineMetrics? = nil, network: SourceNetwork? = nil
    ) throws {
        renderer = FrameRenderer(
            encoder: configuration, loudnessTarget: loudnessTarget, keep: lead, encodeTime: metrics?.encodeTime)
        packetsSkipped = metrics?.sourcePacketsSkipped
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

    deinit { demuxThread?.close() }

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
        renderer.taggedLoudness = decoder.info.taggedLoudness
        opusSource = decoder.info.isOpusStereo48k
        if startMS > 0 { try seek(toMS: startMS) }
    }

    /// Whether the source is open and its samples can be read.
    var isReady: Bool {
        if case .ready = stage { return true }
        return false
    }

    /// Whether a join with the next track has begun (it can no longer be changed or called off).
    var isJoining: Bool { fade != nil }

    /// Plays `next` after this track (nil: nothing follows). Ignored once the join has begun.
    func setFollowing(_ next: Following?) {
        guard fade == nil else { return }
        following = next
    }

    /// The next track's pipeline, carrying on with this one's renderer (one encoder across the
    /// join, so nothing restarts there) and timescale. Call once the join completed, or after
    /// this track ended with the next one ready.
    func handOver() -> Pipeline? {
        guard let next = following?.pipeline else { return nil }
        next.renderer = renderer
        renderer.startTrack(taggedLoudness: next.info?.taggedLoudness)
        next.timescale = timescale
        next.lastSourceMicros = lastSourceMicros
        following = nil
        fade = nil
        return next
    }

    var readAhead: ReadAheadInput.Stats? { demuxThread?.readAhead }

    /// The next 20 ms Opus packet at `volume` percent through `filters`, brought to the target
    /// loudness if `normalize`.
    func nextPacket(volume: Int, filters: Filters = Filters(), normalize: Bool = false) throws -> Next<[UInt8]> {
        guard case .ready(let decoder) = stage else { return .pending }
        let settings = RenderSettings(volume: volume, filters: filters, normalize: normalize)
        setTimescale(filters.timescale)
        renderer.apply(settings)
        joinStarted = false
        joinCompleted = false
        do {
            if opusSource && renderer.leavesUnchanged(volume: volume) && decoded.isEmpty && timescale == nil
                && fade == nil && !fadeBegins
            {
                let packet: CompressedPacket
                switch try nextSourcePacket(decoder) {
                case .end: return .end
                case .pending: return .pending
                case .value(let next): packet = next
                }
                if OpusPacket.isSingle20msFrame(packet.data) {
                    opusDecoder = nil
                    passthrough = true
                    sourcePosition += Int64(OpusEncoder.frameFloats)
                    renderer.passedThrough()
                    previousPacket = packet.data
                    lastSourceMicros = 20_000
                    return .value(packet.data)
                }
                try decodeIntoFIFO(packet.data)
            }
            if timescale != nil {
                switch try stretchedFrame(decoder) {
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
        return .value(try pcm.withUnsafeBufferPointer { try renderer.render($0, settings: settings) })
    }

    /// The next 20 ms of what is heard: this track's, and at its end the next track's, joined on
    /// the sample or mixed over the fade.
    private func heardFrame(_ decoder: MediaDecoder, into frame: inout [Float]) throws -> Next<Void> {
        let needed = OpusEncoder.frameFloats
        if frame.count != needed { frame = [Float](repeating: 0, count: needed) }
        guard let next = following?.pipeline, next.isReady else {
            switch try readSourceFrame(decoder, into: &frame) {
            case .value: return .value(())
            case .end: return .end
            case .pending: return .pending
            }
        }
        if joinFrame.count != needed { joinFrame = [Float](repeating: 0, count: needed) }
        if fade == nil && fadeBegins, let floats = following?.fadeFloats {
            fade = (0, floats)
            joinStarted = true
        }
        if let (done, total) = fade {
            // The next track's frame first: if it is not there yet, none of this one's is taken.
            switch try next.readOwnFrame(into: &joinFrame) {
            case .pending: return .pending
            case .end: joinFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            case .value: break
            }
            switch try readSourceFrame(decoder, into: &frame) {
            case .pending:
                next.unread(joinFrame[...])
                return .pending
            case .end: frame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            case .value: break
            }
            Self.crossfade(&frame, with: joinFrame, from: done, of: total)
            fade = (done + needed, total)
            // This track is cut where the fade ends, whatever is left of it.
            if done + needed >= total { joinCompleted = true }
            return .value(())
        }
        let valid: Int
        switch try readSourceFrame(decoder, into: &frame) {
        case .pending: return .pending
        case .end: valid = 0
        case .value(let count): valid = count
        }
        guard valid < needed else { return .value(()) }
        // This track ends within the frame: the next one's first samples fill the rest of it.
        switch try next.readOwnFrame(into: &joinFrame) {
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
        fade = (0, 0)
        joinStarted = true
        joinCompleted = true
        return .value(())
    }

    /// Whether the fade into the next track starts with the next frame: the next track is open,
    /// a fade is asked for, and this track's known duration ends within it.
    private var fadeBegins: Bool {
        guard fade == nil, let following, following.fadeFloats > 0, following.pipeline.isReady,
            let duration = info?.durationMS, duration > 0
        else { return false }
        let end = 2 * MediaTime.samples(ms: duration)
        return sourcePosition + Int64(OpusEncoder.frameFloats) > end - Int64(following.fadeFloats)
    }

    /// Equal-power curves: this track's level falls as the cosine, the next one's rises as the
    /// sine, so the sum keeps its loudness through the fade. `done` and `total` are in floats.
    static func crossfade(_ frame: inout [Float], with next: [Float], from done: Int, of total: Int) {
        let pairs = min(frame.count, next.count) / 2
        for pair in 0..<pairs {
            let progress = min(Float(done / 2 + pair) / Float(max(total / 2, 1)), 1)
            let out = cos(progress * .pi / 2), into = sin(progress * .pi / 2)
            for channel in 0..<2 {
                let index = pair * 2 + channel
                frame[index] = frame[index] * out + next[index] * into
            }
        }
    }

    /// The next 20 ms of this track's own samples (the next track's side of a join).
    private func readOwnFrame(into frame: inout [Float]) throws -> Next<Int> {
        guard case .ready(let decoder) = stage else { return .pending }
        return try readSourceFrame(decoder, into: &frame)
    }

    /// Samples read but not used go back in front of the source.
    private func unread(_ samples: ArraySlice<Float>) {
        guard !samples.isEmpty else { return }
        decoded = Array(samples) + decoded
        sourcePosition -= Int64(samples.count)
    }

    /// The next 20 ms of decoded source: what is waiting in `decoded` first, then the source's.
    /// Says how many floats are the source's (the last frame is padded with silence).
    private func readSourceFrame(_ decoder: MediaDecoder, into frame: inout [Float]) throws -> Next<Int> {
        let needed = OpusEncoder.frameFloats
        if !opusSource && decoded.isEmpty {
            let next = try decoder.readFrame(into: &frame)
            if case .value(let count) = next { sourcePosition += Int64(count) }
            return next
        }
        while decoded.count < needed {
            let next: Next<Void>
            if opusSource {
                switch try nextSourcePacket(decoder) {
                case .value(let packet):
                    try decodeIntoFIFO(packet.data)
                    next = .value(())
                case .end: next = .end
                case .pending: next = .pending
                }
            } else {
                switch try decoder.readFrame(into: &scratch) {
                case .value(let count):
                    decoded += scratch[..<count]
                    next = .value(())
                case .end: next = .end
                case .pending: next = .pending
                }
            }
            switch next {
            case .value: continue
            case .pending: return .pending
            case .end:
                guard !decoded.isEmpty else { return .end }
                // The final partial frame, padded with silence.
                let valid = decoded.count
                decoded.append(contentsOf: repeatElement(0, count: needed - decoded.count))
                copyFirstFrame(into: &frame)
                sourcePosition += Int64(valid)
                return .value(valid)
            }
        }
        copyFirstFrame(into: &frame)
        sourcePosition += Int64(needed)
        return .value(needed)
    }

    private func copyFirstFrame(into frame: inout [Float]) {
        let needed = OpusEncoder.frameFloats
        if frame.count != needed { frame = [Float](repeating: 0, count: needed) }
        frame.withUnsafeMutableBufferPointer { out in
            decoded.withUnsafeBufferPointer { source in
                guard let to = out.baseAddress, let from = source.baseAddress else { return }
                to.update(from: from, count: needed)
            }
        }
        decoded.removeFirst(needed)
    }

    /// The next frame through the timescale stage into `pcm`, and the source time it covers.
    private func stretchedFrame(_ decoder: MediaDecoder) throws -> Next<Int> {
        if pcm.count != OpusEncoder.frameFloats { pcm = [Float](repeating: 0, count: OpusEncoder.frameFloats) }
        if sourceFrame.count != OpusEncoder.frameFloats {
            sourceFrame = [Float](repeating: 0, count: OpusEncoder.frameFloats)
        }
        while true {
            if timescale?.hasPlayedAll == true { return .end }
            if let micros = pcm.withUnsafeMutableBufferPointer({ timescale?.pull(into: $0) }) ?? nil {
                return .value(micros)
            }
            if sourceEnded {
                sourceFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
            } else {
                switch try heardFrame(decoder, into: &sourceFrame) {
                case .pending: return .pending
                case .value: break
                case .end:
                    // What the stage holds is still to be heard: silence pushes it out.
                    sourceEnded = true
                    timescale?.sourceEnded()
                    sourceFrame.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
                }
            }
            sourceFrame.withUnsafeBufferPointer { timescale?.push($0) }
        }
    }

    /// Starts, changes or ends the timescale. Ended, the source it took but did not play goes back
    /// in front of the source, so the output goes on from where it was.
    private func setTimescale(_ settings: Timescale?) {
        guard let settings, !settings.isIdentity else {
            guard let released = timescale?.release() else { return }
            timescale = nil
            // After the source's end this is its last moments and the silence that pushed them.
            sourceEnded = false
            // An Opus source goes back to passthrough once `decoded` is empty: whole frames only
            // (less than 20 ms of the source is skipped).
            decoded = opusSource ? Array(released.prefix(released.count / OpusEncoder.frameFloats * OpusEncoder.frameFloats)) + decoded : released + decoded
            return
        }
        if timescale == nil {
            timescale = TimescaleStage(settings)
        } else {
            timescale?.set(settings)
        }
    }

    /// Whether frames go out as the source's own packets with these settings: an Opus source,
    /// and nothing that changes the sound (normalisation counts only if the track's tag is off
    /// the target).
    func passesThrough(volume: Int, filters: Filters, normalize: Bool) -> Bool {
        guard let info else { return false }
        return info.isOpusStereo48k && volume == 100 && filters.isEmpty
            && !(normalize && LoudnessNormalizer.isNeeded(taggedLoudness: info.taggedLoudness, target: renderer.loudnessTarget))
    }

    /// Source packets that went out untouched but will not be sent after all (the settings
    /// changed while they waited): decoded, they go back in front of the source, to be played
    /// through the renderer. `previous` is the packet the listener hears just before them; the
    /// decoder is primed with it so the first decoded frame continues it.
    func takeBack(_ packets: [[UInt8]], after previous: [UInt8]) throws {
        let decoder = try OpusDecoder()
        _ = try? decoder.decode(previous)
        var samples: [Float] = []
        samples.reserveCapacity(packets.count * OpusEncoder.frameFloats)
        for packet in packets {
            // Each went out as one valid-looking 20 ms frame; one libopus refuses is 20 ms of silence.
            let frame = (try? decoder.decode(packet)) ?? []
            samples += frame.count == OpusEncoder.frameFloats ? frame : [Float](repeating: 0, count: OpusEncoder.frameFloats)
        }
        decoded = samples + decoded
        opusDecoder = decoder
        previousPacket = packets.last ?? previous
        passthrough = false
    }

    /// Moves to `positionMS`; the next packet is the frame that starts there.
    func seek(toMS positionMS: Int64) throws {
        guard case .ready(let decoder) = stage else { return }
        do {
            try decoder.seek(toMS: positionMS)
        } catch {
            throw APIError.unplayable(error)
        }
        decoded.removeAll(keepingCapacity: true)
        sourcePosition = 2 * MediaTime.samples(ms: positionMS)
        renderer.forget()
        if let settings = timescale?.settings { timescale = TimescaleStage(settings) }
        sourceEnded = false
        opusDecoder = nil
        previousPacket = nil
        skipPacketsBeforeMS = opusSource ? positionMS : nil
    }

    private func nextSourcePacket(_ decoder: MediaDecoder) throws(MediaError) -> Next<CompressedPacket> {
        while true {
            let next = try decoder.readPacket()
            guard case .value(let packet) = next else { return next }
            if let skip = skipPacketsBeforeMS, let at = packet.positionMS, at + 10 < skip { continue }
            skipPacketsBeforeMS = nil
            return next
        }
    }

    /// Decodes a source packet into the FIFO. A packet libopus refuses (corrupt, or larger than
    /// any valid one) is skipped and counted, as a player skips a damaged frame; a second of them
    /// in a row ends the play with a clear error.
    private func decodeIntoFIFO(_ packet: [UInt8]) throws {
        let decoder: OpusDecoder
        if let opusDecoder {
            decoder = opusDecoder
        } else {
            // Switching from passthrough mid-stream: prime a fresh decoder with the packet the
            // listener heard last, so the first decoded frame continues it smoothly.
            decoder = try OpusDecoder()
            if let previousPacket { _ = try? decoder.decode(previousPacket) }
            opusDecoder = decoder
        }
        do {
            decoded += try decoder.decode(packet)
        } catch {
            packetsSkipped?.increment()
            invalidInARow += 1
            guard invalidInARow < Self.invalidPacketsLimit else {
                throw APIError.unplayable(
                    MediaError(kind: .decodeFailed, message: "\(Self.invalidPacketsLimit) packets in a row are not valid Opus"))
            }
            return
        }
        invalidInARow = 0
        previousPacket = packet
    }
}

/// Reading the TOC byte of an Opus packet (RFC 6716, section 3.1).
enum OpusPacket {
    /// A code-0 packet's one frame is at most 1,275 bytes (RFC 6716, section 3.2.1).
    static let maxSingleFramePacket = 1 + 1_275

    /// Whether `packet` holds exactly one frame of 20 ms, of a size a valid packet can have.
    static func isSingle20msFrame(_ packet: [UInt8]) -> Bool {
        guard let toc = packet.first, packet.count <= maxSingleFramePacket else { return false }
        let config = Int(toc >> 3)
        let frameCount = toc & 0x3
        guard frameCount == 0 else { return false }
        let duration10us: Int
        switch config {
        case 0...11: duration10us = [1000, 2000, 4000, 6000][config % 4]  // SILK: 10, 20, 40, 60 ms
        case 12...15: duration10us = [1000, 2000][config % 2]  // Hybrid: 10, 20 ms
        default: duration10us = [250, 500, 1000, 2000][config % 4]  // CELT: 2.5, 5, 10, 20 ms
        }
        return duration10us == 2000
    }
}
