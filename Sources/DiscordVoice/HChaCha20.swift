// HChaCha20 (draft-irtf-cfrg-xchacha, section 2.2): the ChaCha20 block function over a key and a
// 16-byte nonce, without the final addition, keeping the state's first and last rows. It derives
// XChaCha20's per-nonce subkey; swift-crypto has ChaCha20-Poly1305 but no XChaCha20, and this is
// the only part missing. Checked against the draft's test vector and against libsodium (PyNaCl) in
// the tests.
enum HChaCha20 {
    static func subkey(key: [UInt8], nonce: [UInt8]) -> [UInt8] {
        precondition(key.count == 32 && nonce.count == 16, "HChaCha20 takes a 32-byte key and a 16-byte nonce")
        var state: [UInt32] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]
        state += littleEndianWords(key) + littleEndianWords(nonce)
        for _ in 0..<10 {
            quarterRound(&state, 0, 4, 8, 12)
            quarterRound(&state, 1, 5, 9, 13)
            quarterRound(&state, 2, 6, 10, 14)
            quarterRound(&state, 3, 7, 11, 15)
            quarterRound(&state, 0, 5, 10, 15)
            quarterRound(&state, 1, 6, 11, 12)
            quarterRound(&state, 2, 7, 8, 13)
            quarterRound(&state, 3, 4, 9, 14)
        }
        return (state[0..<4] + state[12..<16]).flatMap { word in
            [UInt8(word & 0xFF), UInt8((word >> 8) & 0xFF), UInt8((word >> 16) & 0xFF), UInt8(word >> 24)]
        }
    }

    private static func littleEndianWords(_ bytes: [UInt8]) -> [UInt32] {
        stride(from: 0, to: bytes.count, by: 4).map { i in
            UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24
        }
    }

    private static func quarterRound(_ s: inout [UInt32], _ a: Int, _ b: Int, _ c: Int, _ d: Int) {
        s[a] &+= s[b]; s[d] ^= s[a]; s[d] = s[d].rotated(16)
        s[c] &+= s[d]; s[b] ^= s[c]; s[b] = s[b].rotated(12)
        s[a] &+= s[b]; s[d] ^= s[a]; s[d] = s[d].rotated(8)
        s[c] &+= s[d]; s[b] ^= s[c]; s[b] = s[b].rotated(7)
    }
}

extension UInt32 {
    fileprivate func rotated(_ n: UInt32) -> UInt32 { self << n | self >> (32 - n) }
}
