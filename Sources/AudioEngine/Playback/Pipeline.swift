// Source → Opus packets for one play, on worker threads only. A source that is already Opus at
// 48 kHz stereo in single 20 ms frames goes out untouched while the volume is 100 %; any other
// volume (or source) is decoded, resampled, scaled with a ramp and encoded.
import CoreMetrics
import Foundation

/// The per-play chain: demux/decode (FFmpeg) → gain → encode (libopus), or passthrough.
final class Pipeline {
    let info: MediaInfo
    private let decoder: MediaDecoder
    private let input: ReadAheadInput?
    /// Created at the first frame that needs encoding: a passthrough play never pays for one.
    private var encoder: OpusEncoder?
    private let encoderConfiguration: OpusEncoderConfiguration
    private var pcm = [Float](repeating: 0, count: OpusEncoder.frameFloats)
    /// The gain the last frame ended on; the next frame ramps from here to the target.
    private var gain: Float = 1

    // Opus sources: the libopus decoder used while transcoding, and its pending samples.
    private let opusSource: Bool
    private var opusDecoder: OpusDecoder?
    private var opusFIFO: [Float] = []
    private var previousPacket: [UInt8]?
    /// After a seek: compressed packets that start before this are skipped.
    private var skipPacketsBeforeMS: Int64?
    /// Whether the last packet went out untouched.
    private(set) var passthrough = false

    private let encodeTime: CoreMetrics.Timer?
    private let packetsSkipped: CoreMetrics.Counter?
    /// Invalid packets in a row; this many (a second's worth) end the play as corrupt.
    private var invalidInARow = 0
    static let invalidPacketsLimit = 50

    init(
        source: ResolvedSource, encoder configuration: OpusEncoderConfiguration, startMS: Int64 = 0,
        metrics: EngineMetrics? = nil
    ) throws {
        encodeTime = metrics?.encodeTime
        packetsSkipped = metrics?.sourcePacketsSkipped
        var input: ReadAheadInput?
        do {
            if source.isNetwork {
                var settings = ReadAheadInput.Configuration()
                settings.options = source.protocolOptions
                let reconnects = metrics?.sourceReconnects
                settings.onReconnect = { reconnects?.increment() }
                input = try ReadAheadInput(url: source.location, configuration: settings)
            }
            decoder = try MediaDecoder(url: source.location, io: input)
        } catch let error as MediaError {
            input?.close()
            throw ControlError.unplayable(error)
        }
        self.input = input
        info = decoder.info
        opusSource = info.isOpusStereo48k
        encoderConfiguration = configuration
        if startMS > 0 { try seek(toMS: startMS) }
    }

    deinit { input?.close() }

    var readAhead: ReadAheadInput.Stats? { input?.currentStats }

    /// The next 20 ms Opus packet at `volume` percent, or nil at the end of the source.
    func nextPacket(volume: Int) throws -> [UInt8]? {
        let target = Float(volume) / 100
        do {
            if opusSource {
                return try nextFromOpusSource(target: target)
            }
            guard try decoder.readFrame(into: &pcm) else { return nil }
        } catch let error as MediaError {
            throw ControlError.unplayable(error)
        }
        passthrough = false
        return try encodeFrame(target: target)
    }

    /// Moves to `positionMS`; the next packet is the frame that starts there.
    func seek(toMS positionMS: Int64) throws {
        do {
            try decoder.seek(toMS: positionMS)
        } catch {
            throw ControlError.unplayable(error)
        }
        opusFIFO.removeAll(keepingCapacity: true)
        opusDecoder = nil
        previousPacket = nil
        skipPacketsBeforeMS = opusSource ? positionMS : nil
    }

    private func nextFromOpusSource(target: Float) throws -> [UInt8]? {
        while true {
            if target == 1 && gain == 1 && opusFIFO.isEmpty {
                guard let packet = try nextSourcePacket() else { return nil }
                if OpusPacket.isSingle20msFrame(packet.data) {
                    opusDecoder = nil
                    passthrough = true
                    previousPacket = packet.data
                    return packet.data
                }
                try decodeIntoFIFO(packet.data)
            }
            if opusFIFO.count >= OpusEncoder.frameFloats {
                pcm.withUnsafeMutableBufferPointer { out in
                    opusFIFO.withUnsafeBufferPointer { out.baseAddress!.update(from: $0.baseAddress!, count: out.count) }
                }
                opusFIFO.removeFirst(OpusEncoder.frameFloats)
                passthrough = false
                return try encodeFrame(target: target)
            }
            guard let packet = try nextSourcePacket() else {
                guard !opusFIFO.isEmpty else { return nil }
                // The final partial frame, padded with silence.
                opusFIFO.append(contentsOf: repeatElement(0, count: OpusEncoder.frameFloats - opusFIFO.count))
                continue
            }
            try decodeIntoFIFO(packet.data)
        }
    }

    private func nextSourcePacket() throws(MediaError) -> CompressedPacket? {
        while let packet = try decoder.readPacket() {
            if let skip = skipPacketsBeforeMS, let at = packet.positionMS, at + 10 < skip { continue }
            skipPacketsBeforeMS = nil
            return packet
        }
        return nil
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
            opusFIFO += try decoder.decode(packet)
        } catch {
            packetsSkipped?.increment()
            invalidInARow += 1
            guard invalidInARow < Self.invalidPacketsLimit else {
                throw ControlError.unplayable(
                    MediaError(kind: .decodeFailed, message: "\(Self.invalidPacketsLimit) packets in a row are not valid Opus"))
            }
            return
        }
        invalidInARow = 0
        previousPacket = packet
    }

    /// Applies the gain (ramping linearly over this frame to `target`) and encodes `pcm`.
    private func encodeFrame(target: Float) throws -> [UInt8] {
        if gain != 1 || target != 1 {
            let start = gain
            let step = (target - start) / Float(OpusEncoder.samplesPerFrame)
            pcm.withUnsafeMutableBufferPointer { samples in
                for i in 0..<OpusEncoder.samplesPerFrame {
                    let g = start + step * Float(i + 1)
                    samples[2 * i] *= g
                    samples[2 * i + 1] *= g
                }
            }
            gain = target
        }
        let started = ContinuousClock.now
        defer { encodeTime?.recordNanoseconds(Self.nanoseconds(ContinuousClock.now - started)) }
        let encoder = try encoder ?? OpusEncoder(configuration: encoderConfiguration)
        self.encoder = encoder
        return try pcm.withUnsafeBufferPointer { try encoder.encode($0) { Array($0) } }
    }

    private static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
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
