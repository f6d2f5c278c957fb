// Seals each voice packet for the voice server, in the "rtpsize" AEAD modes (TransportMode): the
// RTP header stays clear and is the additional authenticated data, the Opus payload (already
// end-to-end encrypted by DAVE when the call has it) is sealed with the Session Description's
// secret key, and a 32-bit nonce counter follows the tag, big-endian. The counter is the first 4
// bytes of the nonce, the rest zero; it goes up by one per packet and starts again at 0 after
// 2^32 − 1, as Discord's own clients do.
import Crypto
import Foundation

/// Why a key or a packet cannot be sealed.
public enum TransportCipherError: Error, Equatable, Sendable {
    /// The Session Description's `secret_key` must hold 32 bytes.
    case keySize(Int)
    /// An RTP header is 12 bytes here (no CSRC, no extension).
    case headerSize(Int)
}

/// One voice connection's transport encryption: the mode, the key and the nonce counter.
public struct TransportCipher: Sendable {
    public static let keySize = 32
    public let mode: TransportMode
    private let key: SymmetricKey
    private let keyBytes: [UInt8]
    /// The counter the next packet carries.
    public private(set) var counter: UInt32

    public init(mode: TransportMode, secretKey: [UInt8], counter: UInt32 = 0) throws(TransportCipherError) {
        guard secretKey.count == Self.keySize else { throw .keySize(secretKey.count) }
        self.mode = mode
        self.key = SymmetricKey(data: secretKey)
        self.keyBytes = secretKey
        self.counter = counter
    }

    /// `header`, the sealed `payload` with its tag, and the counter: the UDP datagram to send.
    public mutating func seal(header: [UInt8], payload: [UInt8]) throws -> [UInt8] {
        guard header.count == RTPStream.headerSize else { throw TransportCipherError.headerSize(header.count) }
        let counterBytes = [UInt8(counter >> 24), UInt8((counter >> 16) & 0xFF), UInt8((counter >> 8) & 0xFF), UInt8(counter & 0xFF)]
        counter &+= 1
        var packet = header
        packet.reserveCapacity(header.count + payload.count + TransportMode.tagSize + TransportMode.counterSize)
        switch mode {
        case .aes256GCM:
            let nonce = try AES.GCM.Nonce(data: counterBytes + [UInt8](repeating: 0, count: 8))
            let box = try AES.GCM.seal(payload, using: key, nonce: nonce, authenticating: header)
            packet.append(contentsOf: box.ciphertext)
            packet.append(contentsOf: box.tag)
        case .xchacha20Poly1305:
            // XChaCha20-Poly1305: a subkey from HChaCha20 over the nonce's first 16 bytes, then
            // ChaCha20-Poly1305 (RFC 8439) with 4 zero bytes and the nonce's last 8 as its nonce.
            // The counter sits in the first 16 bytes, so each packet has a subkey of its own.
            let subkey = HChaCha20.subkey(key: keyBytes, nonce: counterBytes + [UInt8](repeating: 0, count: 12))
            let nonce = try ChaChaPoly.Nonce(data: [UInt8](repeating: 0, count: 12))
            let box = try ChaChaPoly.seal(payload, using: SymmetricKey(data: subkey), nonce: nonce, authenticating: header)
            packet.append(contentsOf: box.ciphertext)
            packet.append(contentsOf: box.tag)
        }
        packet.append(contentsOf: counterBytes)
        return packet
    }
}
