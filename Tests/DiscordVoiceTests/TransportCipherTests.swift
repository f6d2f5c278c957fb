// The transport encryption of Discord voice packets, judged by other implementations: fixed
// vectors made with libsodium and OpenSSL, and a run of random packets opened by them
// (Tests/Fixtures/open_voice_packets.py) as the voice server would open them.
import Foundation
import Testing
import TestSupport

@testable import DiscordVoice

struct TransportCipherTests {
    static let key = [UInt8](0..<32)
    static let header: [UInt8] = [0x80, 0x78, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0x30, 0x39]
    static let silence: [UInt8] = [0xf8, 0xff, 0xfe]

    /// Sealed `silence` under `header` at counters 0, 7 and 2^32 − 1, by libsodium
    /// (crypto_aead_xchacha20poly1305_ietf_encrypt) and OpenSSL (cryptography's AESGCM).
    static let vectors: [(TransportMode, UInt32, String)] = [
        (.xchacha20Poly1305, 0, "6df972ec92cae47b7ba490dc312f7304c8bcf0"),
        (.xchacha20Poly1305, 7, "4e48a390b139c23bd172a483370337fcf16c96"),
        (.xchacha20Poly1305, .max, "68c87a2c343c9bb4808a54b4ab9b30ef157669"),
        (.aes256GCM, 0, "f6434beb8b46849a444526871af8d1d4dfe7b5"),
        (.aes256GCM, 7, "a7182a42b6b6ac90116628c509ebde2d3d4037"),
        (.aes256GCM, .max, "6170545b99556a3c27ed0dd3fa921acce20e98"),
    ]

    @Test(arguments: vectors)
    func aPacketIsTheHeaderTheSealedPayloadAndTheCounter(mode: TransportMode, counter: UInt32, sealed: String) throws {
        var cipher = try TransportCipher(mode: mode, secretKey: Self.key, counter: counter)
        let packet = try cipher.seal(header: Self.header, payload: Self.silence)
        let counterBytes = [UInt8(counter >> 24), UInt8((counter >> 16) & 0xFF), UInt8((counter >> 8) & 0xFF), UInt8(counter & 0xFF)]
        #expect(packet == Self.header + hexBytes(sealed) + counterBytes)
        #expect(cipher.counter == counter &+ 1, "the counter goes up by one and starts again at 0 after 2^32 - 1")
    }

    @Test(arguments: TransportMode.allCases)
    func randomPacketsOpenWithTheVoiceServersLibraries(mode: TransportMode) throws {
        let key = (0..<32).map { _ in UInt8.random(in: 0...255) }
        var cipher = try TransportCipher(mode: mode, secretKey: key, counter: .max - 100)
        var stream = RTPStream(ssrc: 0x1234_5678)
        var packets: [[String: String]] = []
        for _ in 0..<300 {
            let payload = (0..<Int.random(in: 1...400)).map { _ in UInt8.random(in: 0...255) }
            let packet = try cipher.seal(header: stream.nextHeader(), payload: payload)
            packets.append(["packet": hex(packet), "payload": hex(payload)])
        }
        let spec: [String: Any] = ["mode": mode.rawValue, "key": hex(key), "packets": packets]
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("voice-\(UUID().uuidString).json")
        try JSONSerialization.data(withJSONObject: spec).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/open_voice_packets.py").path
        _ = try runTool("python3", [script, file.path])
    }

    @Test func aKeyOtherThan32BytesAndAHeaderOtherThan12AreRefused() throws {
        #expect(throws: TransportCipherError.keySize(16)) { try TransportCipher(mode: .aes256GCM, secretKey: [UInt8](repeating: 1, count: 16)) }
        var cipher = try TransportCipher(mode: .aes256GCM, secretKey: Self.key)
        #expect(throws: TransportCipherError.headerSize(13)) { try cipher.seal(header: Self.header + [0], payload: Self.silence) }
        #expect(cipher.counter == 0, "a refused packet uses no counter")
    }

    /// draft-irtf-cfrg-xchacha-03, section 2.2.1.
    @Test func hChaCha20GivesTheDraftsTestVector() {
        let nonce = hexBytes("000000090000004a0000000031415927")
        #expect(hex(HChaCha20.subkey(key: Self.key, nonce: nonce)) == "82413b4227b27bfed30e42508a877d73a0f9e4d58a74a853c12ec41326d3ecdc")
    }

    @Test func aesIsChosenWhereOfferedThenXChaCha() {
        #expect(TransportMode.choose(offered: ["aead_xchacha20_poly1305_rtpsize", "aead_aes256_gcm_rtpsize"]) == .aes256GCM)
        #expect(TransportMode.choose(offered: ["xsalsa20_poly1305", "aead_xchacha20_poly1305_rtpsize"]) == .xchacha20Poly1305)
        #expect(TransportMode.choose(offered: ["xsalsa20_poly1305_lite", "xsalsa20_poly1305"]) == nil)
    }
}

func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

func hexBytes(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        bytes.append(UInt8(text[index..<next], radix: 16) ?? 0)
        index = next
    }
    return bytes
}
