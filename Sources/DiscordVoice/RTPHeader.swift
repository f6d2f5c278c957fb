// The RTP header of each voice packet a Discord voice connection sends (RFC 3550, as Discord
// uses it): version 2, no padding, no extension, no CSRC; payload type 120 (Opus); the sequence
// number one more per packet and the timestamp 960 more (20 ms at 48 kHz), both wrapping; the
// SSRC the voice server assigned in Ready (op 2).

/// The sequence, timestamp and SSRC of one voice connection's outgoing stream.
public struct RTPStream: Sendable, Equatable {
    public static let headerSize = 12
    public static let payloadType: UInt8 = 0x78
    /// 20 ms of 48 kHz samples: what every Opus frame from the engine holds.
    public static let samplesPerFrame: UInt32 = 960

    public let ssrc: UInt32
    public private(set) var sequence: UInt16
    public private(set) var timestamp: UInt32

    /// Starts where a stream may start: RFC 3550 asks for random initial values (Discord accepts
    /// any); tests pass fixed ones.
    public init(ssrc: UInt32, sequence: UInt16 = .random(in: .min ... .max), timestamp: UInt32 = .random(in: .min ... .max)) {
        self.ssrc = ssrc
        self.sequence = sequence
        self.timestamp = timestamp
    }

    /// The header of the next packet; advances the sequence by one and the timestamp by one frame.
    public mutating func nextHeader() -> [UInt8] {
        let header = Self.header(ssrc: ssrc, sequence: sequence, timestamp: timestamp)
        sequence &+= 1
        timestamp &+= Self.samplesPerFrame
        return header
    }

    /// Moves the timestamp on by `frames` frames that were not sent (a pause the listener should
    /// hear as time passing), without using sequence numbers for them.
    public mutating func skip(frames: UInt32) {
        timestamp &+= frames &* Self.samplesPerFrame
    }

    static func header(ssrc: UInt32, sequence: UInt16, timestamp: UInt32) -> [UInt8] {
        var header: [UInt8] = [0x80, payloadType]
        header.reserveCapacity(headerSize)
        header.append(contentsOf: [UInt8(sequence >> 8), UInt8(sequence & 0xFF)])
        for value in [timestamp, ssrc] {
            header.append(contentsOf: [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)])
        }
        return header
    }
}
