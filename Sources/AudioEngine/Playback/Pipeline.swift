// Source → 48 kHz stereo floats → Opus packets, for one play. Lives on worker threads only.

/// The decode → resample → encode chain of one play.
final class Pipeline {
    let info: MediaInfo
    private let decoder: MediaDecoder
    private let encoder: OpusEncoder
    private var pcm = [Float](repeating: 0, count: OpusEncoder.frameFloats)

    init(source: ResolvedSource, encoder configuration: OpusEncoderConfiguration) throws {
        do {
            decoder = try MediaDecoder(url: source.location)
        } catch {
            throw ControlError.unplayable(error)
        }
        info = decoder.info
        encoder = try OpusEncoder(configuration: configuration)
    }

    /// The next 20 ms Opus packet, or nil at the end of the source.
    func nextPacket() throws -> [UInt8]? {
        do {
            guard try decoder.readFrame(into: &pcm) else { return nil }
        } catch {
            throw ControlError.unplayable(error)
        }
        return try pcm.withUnsafeBufferPointer { try encoder.encode($0) { Array($0) } }
    }
}
