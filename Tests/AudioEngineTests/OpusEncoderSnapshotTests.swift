import Foundation
import Testing

@testable import AudioEngine

@Suite struct OpusEncoderSnapshotTests {
    /// Stereo music with a little noise, as an encoder in use sees it.
    private static func frame(_ index: Int) -> [Float] {
        var generator = SystemRandomNumberGenerator()
        return (0..<OpusEncoder.samplesPerFrame).flatMap { i -> [Float] in
            let t = Double(index * OpusEncoder.samplesPerFrame + i) / 48_000
            let chord = 0.2 * sin(2 * .pi * 220 * t) + 0.15 * sin(2 * .pi * 277.18 * t) + 0.1 * sin(2 * .pi * 329.63 * t)
            let noise = Double.random(in: -0.02...0.02, using: &generator)
            return [Float(chord + noise), Float(chord - noise)]
        }
    }

    private static func encode(_ encoder: OpusEncoder, _ pcm: [Float]) throws -> [UInt8] {
        try pcm.withUnsafeBufferPointer { try encoder.encode($0) { Array($0) } }
    }

    /// A state put back encodes the next frames exactly as the encoder did the first time, and the
    /// snapshot keeps less than the whole state (the zero blocks are left out).
    @Test func aStatePutBackEncodesTheSameBytesAndTheSnapshotLeavesOutZeroBlocks() throws {
        let encoder = try OpusEncoder()
        for index in 0..<100 { _ = try Self.encode(encoder, Self.frame(index)) }
        var snapshot = OpusEncoderSnapshot()
        encoder.save(into: &snapshot)
        let saved = encoder.stateCopy()
        let next = (100..<110).map(Self.frame)
        let first = try next.map { try Self.encode(encoder, $0) }
        // Another snapshot taken into the same storage in between must not disturb the first.
        var other = snapshot
        encoder.save(into: &other)
        encoder.restore(from: snapshot)
        let again = try next.map { try Self.encode(encoder, $0) }
        #expect(first == again)
        #expect(snapshot.keptBytes < OpusEncoder.stateBytes * 3 / 4, "\(snapshot.keptBytes) of \(OpusEncoder.stateBytes) bytes kept")
        #expect(snapshot.keptBytes > 1_000)

        // Put back into an encoder that has run its speech coder too (10 kbit/s): the blocks left
        // out are zero again, and it encodes as the first did.
        let stranger = try OpusEncoder(configuration: OpusEncoderConfiguration(bitrate: 10_000, complexity: 3))
        for index in 500..<520 { _ = try Self.encode(stranger, Self.frame(index)) }
        stranger.restore(from: snapshot)
        let identical = stranger.stateCopy() == saved
        #expect(identical, "the state put back differs from the one saved")
        #expect(try next.map { try Self.encode(stranger, $0) } == first)
    }

    /// Any layout of zero and non-zero blocks, with any record of blocks stored before, comes back
    /// byte for byte over whatever the memory held: runs across the bitmap's 64-block words, the
    /// first and last blocks, the tail, nothing stored, everything stored.
    @Test func everyLayoutOfZeroBlocksComesBackByteForByte() {
        let size = OpusEncoder.stateBytes
        let blocks = OpusEncoderSnapshot.wholeBlocks
        var generator = SystemRandomNumberGenerator()
        var layouts: [(String, (Int) -> Bool)] = [
            ("all zero", { _ in false }),
            ("all in use", { _ in true }),
            ("first and last", { $0 == 0 || $0 == blocks - 1 }),
            ("across words", { (60..<70).contains($0) || (120..<200).contains($0) }),
            ("every other", { $0 % 2 == 0 }),
        ]
        for _ in 0..<20 {
            let share = Double.random(in: 0...1, using: &generator)
            var chosen = Set<Int>()
            for block in 0..<blocks where Double.random(in: 0...1, using: &generator) < share { chosen.insert(block) }
            layouts.append(("random", { chosen.contains($0) }))
        }
        for (name, inUse) in layouts {
            var state = [UInt8](repeating: 0, count: size)
            for block in 0..<blocks where inUse(block) {
                // One non-zero byte somewhere in the block is enough to make it count.
                state[block * 64 + Int.random(in: 0..<64, using: &generator)] = UInt8.random(in: 1...255, using: &generator)
            }
            for i in (blocks * 64)..<size { state[i] = UInt8.random(in: 0...255, using: &generator) }
            let hinted = Bool.random(using: &generator)
            var hint: [UInt64] = hinted
                ? (0..<OpusEncoderSnapshot.words).map { _ in UInt64.random(in: 0...UInt64.max, using: &generator) } : []
            var snapshot = OpusEncoderSnapshot()
            state.withUnsafeBytes { snapshot.take(from: $0.baseAddress!, everStored: &hint) }
            var restored = (0..<size).map { _ in UInt8.random(in: 0...255, using: &generator) }
            restored.withUnsafeMutableBytes { snapshot.put(into: $0.baseAddress!) }
            let identical = restored == state
            #expect(identical, "\(name): the state put back differs")
            // Without a record of blocks stored before, an all-zero state keeps only its tail.
            if name == "all zero" && !hinted { #expect(snapshot.keptBytes < 4_096 + 200) }
        }
    }
}
