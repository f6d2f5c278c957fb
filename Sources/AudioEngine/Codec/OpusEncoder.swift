// The libopus encoder behind a Swift type: 48 kHz stereo, 20 ms frames, float PCM in.
import COpus

/// Errors from libopus, with its own description of the code.
public struct OpusError: Error, CustomStringConvertible, Equatable {
    public let code: Int32
    public let operation: String
    public var description: String {
        "\(operation) failed: \(String(cString: opus_strerror(code))) (\(code))"
    }
}

/// Settings of the Opus encoder. The defaults are the design's: music, complexity 10, 128 kbit/s.
public struct OpusEncoderConfiguration: Sendable, Equatable {
    public var bitrate: Int32 = 128_000
    public var complexity: Int32 = 10
    public init(bitrate: Int32 = 128_000, complexity: Int32 = 10) {
        self.bitrate = bitrate
        self.complexity = complexity
    }
}

/// Encodes 20 ms stereo frames (960 samples per channel, interleaved floats) into Opus packets.
public final class OpusEncoder {
    public static let sampleRate: Int32 = 48_000
    public static let channels = 2
    public static let samplesPerFrame = 960
    /// Interleaved floats in one frame.
    public static let frameFloats = samplesPerFrame * channels
    /// Upper bound of one packet at these settings (libopus's recommended buffer size).
    static let maxPacketBytes = 4_000

    private let encoder: OpaquePointer
    /// Bytes of the encoder's state: libopus keeps it in one position-independent block that
    /// can be copied as it is (opus.h), which is how a frame can be encoded again from the
    /// state before it.
    public static let stateBytes = Int(opus_encoder_get_size(Int32(channels)))
    private var output = [UInt8](repeating: 0, count: OpusEncoder.maxPacketBytes)
    /// The state's blocks a snapshot of it has stored so far (see `OpusEncoderSnapshot`).
    private var storedBlocks: [UInt64] = []
    /// The complexity last set, nil once a state was put back (it holds the one it was saved with).
    private var appliedComplexity: Int32?

    public init(configuration: OpusEncoderConfiguration = .init()) throws(OpusError) {
        var error: Int32 = 0
        guard let encoder = opus_encoder_create(Self.sampleRate, Int32(Self.channels), OPUS_APPLICATION_AUDIO, &error),
            error == OPUS_OK
        else { throw OpusError(code: error, operation: "opus_encoder_create") }
        self.encoder = encoder
        try Self.check(tonearm_opus_set_bitrate(encoder, configuration.bitrate), "OPUS_SET_BITRATE")
        try Self.check(tonearm_opus_set_complexity(encoder, configuration.complexity), "OPUS_SET_COMPLEXITY")
        appliedComplexity = configuration.complexity
        try Self.check(tonearm_opus_set_signal_music(encoder), "OPUS_SET_SIGNAL")
    }

    deinit { opus_encoder_destroy(encoder) }

    /// Encodes exactly one frame of `frameFloats` interleaved samples and hands the packet to `body`.
    public func encode<R>(
        _ pcm: UnsafeBufferPointer<Float>, _ body: (UnsafeRawBufferPointer) throws -> R
    ) throws -> R {
        precondition(pcm.count == Self.frameFloats, "an Opus frame is \(Self.frameFloats) interleaved floats")
        let length = output.withUnsafeMutableBufferPointer { out in
            opus_encode_float(encoder, pcm.baseAddress!, Int32(Self.samplesPerFrame), out.baseAddress!, Int32(out.count))
        }
        guard length > 0 else { throw OpusError(code: length, operation: "opus_encode_float") }
        return try output.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[0..<Int(length)])) }
    }

    /// Copies the encoder's whole state into `snapshot`, its all-zero stretches left out.
    public func save(into snapshot: inout OpusEncoderSnapshot) {
        snapshot.take(from: UnsafeRawPointer(encoder), everStored: &storedBlocks)
    }

    /// Puts back a state `save(into:)` copied from this encoder: the next frame is encoded as if
    /// nothing had been encoded since.
    public func restore(from snapshot: OpusEncoderSnapshot) {
        snapshot.put(into: UnsafeMutableRawPointer(encoder))
        appliedComplexity = nil
    }

    /// Encodes from the next frame at `complexity` (0–10; libopus takes a change mid-stream).
    public func setComplexity(_ complexity: Int32) {
        guard complexity != appliedComplexity, (0...10).contains(complexity) else { return }
        if tonearm_opus_set_complexity(encoder, complexity) == OPUS_OK { appliedComplexity = complexity }
    }

    /// The state's bytes as they are (for tests: a snapshot put back must equal them).
    func stateCopy() -> [UInt8] {
        Array(UnsafeRawBufferPointer(start: UnsafeRawPointer(encoder), count: Self.stateBytes))
    }

    private static func check(_ code: Int32, _ operation: String) throws(OpusError) {
        guard code == OPUS_OK else { throw OpusError(code: code, operation: operation) }
    }
}

