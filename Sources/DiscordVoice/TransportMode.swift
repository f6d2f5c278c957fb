// The transport encryption a Discord voice connection may use, as its voice gateway names them.
//
// The voice server lists the modes it accepts in Ready (op 2, `modes`); the client picks one in
// Select Protocol (op 1). Since November 2024 Discord offers only the two AEAD modes whose
// additional data is the RTP header ("rtpsize"): AES-256-GCM where the server's CPU has AES, and
// XChaCha20-Poly1305 always. Both take the Session Description's 32-byte `secret_key`.

/// A transport encryption mode this connection can speak.
public enum TransportMode: String, Sendable, CaseIterable {
    case aes256GCM = "aead_aes256_gcm_rtpsize"
    case xchacha20Poly1305 = "aead_xchacha20_poly1305_rtpsize"

    /// The bytes a sealed packet adds after the payload: the AEAD tag, then the nonce counter.
    public static let tagSize = 16
    public static let counterSize = 4

    /// The mode to select from what the server offers: AES-256-GCM first (the cheaper of the two
    /// where AES is in hardware, and what Discord prefers), else XChaCha20-Poly1305; nil when the
    /// server offers neither (the connection then cannot be made: there is no mode to fall back to).
    public static func choose(offered: [String]) -> TransportMode? {
        allCases.first { offered.contains($0.rawValue) }
    }
}
