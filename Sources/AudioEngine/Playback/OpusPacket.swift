// What a passthrough needs to know of an Opus packet before sending it untouched.
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
