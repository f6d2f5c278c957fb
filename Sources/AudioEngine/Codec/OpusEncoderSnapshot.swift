// The encoder's state kept for a frame encoded ahead, so the frame can be encoded again after a
// change: only the 64-byte blocks that are not all zero, with a bitmap of which.
import COpus

/// A copy of an encoder's state. libopus keeps the state in one block of about 48 KB, of which a
/// stereo 128 kbit/s music encoder leaves 40 % zero (its speech coder's half, unused in music
/// mode): the snapshot stores the 64-byte blocks that are not all zero, and a bit for each block
/// saying which; put back, the state is the same byte for byte. What the encoder has had stored
/// once is stored again without looking (a stored block of zeros is harmless), so only the blocks
/// never seen in use are read for zeros: a snapshot costs about what copying the whole state did.
public struct OpusEncoderSnapshot: Sendable {
    static let blockBytes = 64
    static let wholeBlocks = OpusEncoder.stateBytes / blockBytes
    static let words = (wholeBlocks + 63) / 64
    /// The bytes after the last whole block, always stored.
    static let tailBytes = OpusEncoder.stateBytes % blockBytes

    /// Bit `b % 64` of word `b / 64`: block `b` is stored.
    private var present: [UInt64] = []
    /// The stored blocks in order, then the tail (the storage may be longer: it only grows).
    private var bytes: [UInt8] = []

    public init() {}

    /// Whether a state was ever saved into it.
    public var isEmpty: Bool { present.isEmpty }
    /// Bytes the snapshot keeps, the bitmap included (its storage grows to the most it needed).
    public var keptBytes: Int { bytes.count + present.count * 8 }

    /// Stores `state`: every block in `everStored`, and any other that is not all zero (which
    /// joins `everStored`).
    mutating func take(from state: UnsafeRawPointer, everStored known: inout [UInt64]) {
        if known.count != Self.words { known = [UInt64](repeating: 0, count: Self.words) }
        known.withUnsafeMutableBufferPointer { known in
            for word in 0..<Self.words {
                var unseen = ~known[word] & Self.validBits(word)
                while unseen != 0 {
                    let bit = unseen.trailingZeroBitCount
                    unseen &= unseen - 1
                    let block = (state + (word * 64 + bit) * Self.blockBytes).loadUnaligned(as: SIMD8<UInt64>.self)
                    if block != .zero { known[word] |= 1 << UInt64(bit) }
                }
            }
        }
        // Copied word by word: sharing the encoder's array would make its next update copy it.
        if present.count != Self.words { present = [UInt64](repeating: 0, count: Self.words) }
        for word in 0..<Self.words { present[word] = known[word] }
        let needed = present.reduce(0) { $0 + $1.nonzeroBitCount } * Self.blockBytes + Self.tailBytes
        // Grown in 4 KB steps (a state fills up over its first frames), never shrunk.
        if bytes.count < needed { bytes = [UInt8](repeating: 0, count: (needed + 4_095) / 4_096 * 4_096) }
        let present = present
        bytes.withUnsafeMutableBytes { out in
            guard let out = out.baseAddress else { return }
            var at = 0
            Self.forEachRun(present) { first, count in
                (out + at).copyMemory(from: state + first * Self.blockBytes, byteCount: count * Self.blockBytes)
                at += count * Self.blockBytes
            }
            (out + at).copyMemory(from: state + Self.wholeBlocks * Self.blockBytes, byteCount: Self.tailBytes)
        }
    }

    func put(into state: UnsafeMutableRawPointer) {
        precondition(!present.isEmpty, "an encoder snapshot is put back only after one was taken")
        state.initializeMemory(as: UInt8.self, repeating: 0, count: OpusEncoder.stateBytes)
        bytes.withUnsafeBytes { stored in
            guard let stored = stored.baseAddress else { return }
            var at = 0
            Self.forEachRun(present) { first, count in
                (state + first * Self.blockBytes).copyMemory(from: stored + at, byteCount: count * Self.blockBytes)
                at += count * Self.blockBytes
            }
            (state + Self.wholeBlocks * Self.blockBytes).copyMemory(from: stored + at, byteCount: Self.tailBytes)
        }
    }

    /// The bits of `word` that name a whole block.
    private static func validBits(_ word: Int) -> UInt64 {
        let blocks = wholeBlocks - word * 64
        return blocks >= 64 ? ~0 : (1 << UInt64(blocks)) - 1
    }

    /// Calls `body` with each run of consecutive stored blocks: its first block and length.
    private static func forEachRun(_ present: [UInt64], _ body: (Int, Int) -> Void) {
        var runStart: Int?
        for word in 0..<words {
            var bits = present[word] & validBits(word)
            var bit = 0
            // Walk the word's alternating stretches of set and clear bits.
            while bit < 64 {
                if runStart == nil {
                    guard bits != 0 else { break }
                    let skip = bits.trailingZeroBitCount
                    bit += skip
                    bits >>= UInt64(skip)
                    runStart = word * 64 + bit
                } else {
                    let ones = (~bits).trailingZeroBitCount
                    bit += ones
                    if bit >= 64 { break }
                    bits >>= UInt64(ones)
                    if let start = runStart { body(start, word * 64 + bit - start) }
                    runStart = nil
                }
            }
        }
        if let start = runStart { body(start, wholeBlocks - start) }
    }
}
