import Foundation
import Testing

@testable import AudioEngine

@Suite struct NetworkPolicyTests {
    @Test(arguments: [
        "127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1", "fc00::2",
        "ff02::1", "::ffff:127.0.0.1", "::ffff:10.1.1.1",
    ])
    func nonPublicAddresses(address: String) {
        #expect(!NetworkPolicy.isPublic(address))
    }

    @Test(arguments: ["8.8.8.8", "1.1.1.1", "172.32.0.1", "192.169.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"])
    func publicAddresses(address: String) {
        #expect(NetworkPolicy.isPublic(address))
    }

    @Test func hostsResolvingToLoopbackAreRefusedUnlessAllowed() throws {
        #expect { try NetworkPolicy().check(host: "localhost") } throws: { ($0 as? ControlError)?.code == "private_address" }
        try NetworkPolicy(allowPrivateSources: true).check(host: "localhost")
        #expect { try NetworkPolicy().check(host: "no-such-host.invalid") } throws: {
            ($0 as? ControlError)?.code == "source_unreachable"
        }
    }

    @Test func signedStreamURLsCarryTheirExpiry() {
        #expect(YTDLP.expiry(of: "https://r1.example/videoplayback?expire=1700000000&x=1")?.timeIntervalSince1970 == 1_700_000_000)
        #expect(YTDLP.expiry(of: "https://example.com/a.mp3") == nil)
    }

    @Test(arguments: [("http://x/a.mp3", "http"), ("HTTPS://x", "https"), ("file:///etc", "file"), ("song.mp3", nil), ("C:\\\\a.mp3", nil)] as [(String, String?)])
    func schemes(text: String, scheme: String?) {
        #expect(SourceResolver.scheme(of: text) == scheme)
    }
}
