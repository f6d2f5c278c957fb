// The libopus decoder behind a Swift type; used to decode passthrough sources' packets when a
// volume change applies, and by the tests to hear what the engine sent.
import COpus

/// Decodes Opus packets into 48 kHz stereo interleaved floats.
public final class OpusDecoder {
    private let decoder: OpaquePointer
    /// The largest frame Opus allows: 120 ms at 48 kHz.
    private static let maxSamplesPerChannel = 5_760
    private var pcm = [Float](repeating: 0, count: maxSamplesPerChannel * OpusEncoder.channels)

    public init() throws(OpusError) {
        var error: Int32 = 0
        guard let decoder = opus_decoder_create(OpusEncoder.sampleRate, Int32(OpusEncoder.channels), &error),
            error == OPUS_OK
        else { throw OpusError(code: error, operation: "opus_decoder_create") }
        self.decoder = decoder
    }

    deinit { opus_decoder_destroy(decoder) }

    /// Decodes one packet and returns its interleaved stereo samples.
    public func decode(_ packet: some Collection<UInt8>) throws(OpusError) -> [Float] {
        let bytes = Array(packet)
        let samples = bytes.withUnsafeBufferPointer { input in
            pcm.withUnsafeMutableBufferPointer { out in
                opus_decode_float(
                    decoder, input.baseAddress, Int32(input.count), out.baseAddress!, Int32(Self.maxSamplesPerChannel), 0)
            }
        }
        guard samples >= 0 else { throw OpusError(code: samples, operation: "opus_decode_float") }
        return Array(pcm[0..<(Int(samples) * OpusEncoder.channels)])
    }
}
