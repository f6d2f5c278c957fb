// A track's own samples, 20 ms at a time: what the decoder gives, ahead of it what was read and
// put back (a join's spare samples, a timescale's leftovers, packets taken back from
// passthrough), and an Opus source's packets decoded on demand. It also counts where the track
// is, in samples, which a crossfade needs to start on time.
import CoreMetrics
import EngineAPI
import ServiceSupport

struct SourceSamples {
    /// The source is Opus at 48 kHz stereo: its packets may pass through, or decode here (known
    /// once the source is open).
    var opusSource = false
    /// Interleaved floats of the source read since its start: where the track is, in samples.
    private(set) var position: Int64 = 0
    /// Decoded source samples waiting to be played, in front of the source.
    private(set) var decoded: [Float] = []
    private var scratch: [Float] = []
    /// The libopus decoder used while an Opus source is transcoded.
    private var opusDecoder: OpusDecoder?
    /// The packet the listener heard last: a fresh decoder is primed with it.
    private var previousPacket: [UInt8]?
    /// After a seek: compressed packets that start before this are skipped.
    private var skipPacketsBeforeMS: Int64?
    private let packetsSkipped: CoreMetrics.Counter?
    /// Invalid packets in a row; this many (a second's worth) end the play as corrupt.
    private var invalidInARow = 0
    static let invalidPacketsLimit = 50

    init(packetsSkipped: CoreMetrics.Counter?) { self.packetsSkipped = packetsSkipped }

    /// The next 20 ms: what is waiting in `decoded` first, then the source's. Says how many floats
    /// are the source's (the last frame is padded with silence).
    mutating func readFrame(_ decoder: MediaDecoder, into frame: inout [Float]) throws -> Next<Int> {
        let needed = OpusEncoder.frameFloats
        if !opusSource && decoded.isEmpty {
            let next = try decoder.readFrame(into: &frame)
            if case .value(let count) = next { position += Int64(count) }
            return next
        }
        while decoded.count < needed {
            let next: Next<Void>
            if opusSource {
                switch try nextPacket(decoder) {
                case .value(let packet):
                    try decode(packet.data)
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
                takeFirstFrame(into: &frame)
                position += Int64(valid)
                return .value(valid)
            }
        }
        takeFirstFrame(into: &frame)
        position += Int64(needed)
        return .value(needed)
    }

    /// Decodes up to `floats` more of the source ahead, into `decoded` (what a cue-out is looked
    /// for in): `.value(true)` once the source ended, `.value(false)` when that much was decoded,
    /// `.pending` when the network is behind (what was decoded stays).
    mutating func decodeAhead(_ decoder: MediaDecoder, floats: Int) throws -> Next<Bool> {
        let target = decoded.count + floats
        while decoded.count < target {
            if opusSource {
                switch try nextPacket(decoder) {
                case .value(let packet): try decode(packet.data)
                case .end: return .value(true)
                case .pending: return .pending
                }
            } else {
                switch try decoder.readFrame(into: &scratch) {
                case .value(let count): decoded += scratch[..<count]
                case .end: return .value(true)
                case .pending: return .pending
                }
            }
        }
        return .value(false)
    }

    /// Samples read but not used go back in front of the source.
    mutating func unread(_ samples: ArraySlice<Float>) {
        guard !samples.isEmpty else { return }
        decoded = Array(samples) + decoded
        position -= Int64(samples.count)
    }

    /// What a timescale took but did not play goes back in front of the source. For an Opus
    /// source, whole frames only, so it goes back to passthrough once they are played (less than
    /// 20 ms of the source is skipped).
    mutating func putBack(_ released: [Float]) {
        decoded = (opusSource ? Array(released.prefix(released.count / OpusEncoder.frameFloats * OpusEncoder.frameFloats)) : released) + decoded
    }

    /// The next compressed packet of an Opus source (after a seek, none from before its target).
    mutating func nextPacket(_ decoder: MediaDecoder) throws(MediaError) -> Next<CompressedPacket> {
        while true {
            let next = try decoder.readPacket()
            guard case .value(let packet) = next else { return next }
            if let skip = skipPacketsBeforeMS, let at = packet.positionMS, at + 10 < skip { continue }
            skipPacketsBeforeMS = nil
            return next
        }
    }

    /// A packet went out untouched: the next decode starts afresh from it.
    mutating func passedThrough(_ packet: [UInt8]) {
        opusDecoder = nil
        position += Int64(OpusEncoder.frameFloats)
        previousPacket = packet
    }

    /// Decodes a source packet in front of the frames to play. A packet libopus refuses (corrupt,
    /// or larger than any valid one) is skipped and counted, as a player skips a damaged frame; a
    /// second of them in a row ends the play with a clear error.
    mutating func decode(_ packet: [UInt8]) throws {
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

    /// Source packets that went out untouched but will not be sent after all: decoded, they go
    /// back in front of the source. `previous` is the packet the listener hears just before
    /// them; the decoder is primed with it so the first decoded frame continues it.
    mutating func takeBack(_ packets: [[UInt8]], after previous: [UInt8]) throws {
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
    }

    /// The source moved to `positionMS`: nothing read before it is played.
    mutating func seeked(toMS positionMS: Int64) {
        decoded.removeAll(keepingCapacity: true)
        position = 2 * MediaTime.samples(ms: positionMS)
        opusDecoder = nil
        previousPacket = nil
        skipPacketsBeforeMS = opusSource ? positionMS : nil
    }

    private mutating func takeFirstFrame(into frame: inout [Float]) {
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
}
