import Foundation
import ServiceSupport
import Testing

@testable import AudioEngine

@Suite struct NetworkPolicyTests {
    @Test(arguments: [
        "127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254",
        "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::1", "fc00::2",
        "ff02::1", "::ffff:127.0.0.1", "::ffff:10.1.1.1", "192.0.2.1", "198.51.100.7", "203.0.113.9", "192.0.0.8",
        "::127.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a00:1", "2002:7f00:1::1", "2002:c0a8:101::1", "2001:db8::1",
        "2001::1", "100::1", "fec0::1", "240.0.0.1",
    ])
    func nonPublicAddresses(address: String) {
        #expect(!NetworkPolicy.isPublic(address))
    }

    @Test(arguments: [
        "8.8.8.8", "1.1.1.1", "172.32.0.1", "192.169.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8",
        "64:ff9b::808:808", "2002:808:808::1",
    ])
    func publicAddresses(address: String) {
        #expect(NetworkPolicy.isPublic(address))
    }

    @Test func hostsResolvingToLoopbackAreRefusedUnlessAllowed() throws {
        #expect { try NetworkPolicy().addresses(of: "localhost", port: 80) } throws: {
            ($0 as? APIError)?.code == "private_address"
        }
        #expect(try NetworkPolicy(allowPrivateSources: true).addresses(of: "localhost", port: 80).isEmpty == false)
        #expect { try NetworkPolicy().addresses(of: "no-such-host.invalid", port: 80) } throws: {
            ($0 as? APIError)?.code == "source_unreachable"
        }
        // Numeric forms getaddrinfo accepts are looked up, and refused, the same way.
        for host in ["2130706433", "127.1", "0x7f000001"] {
            #expect(throws: APIError.self, "\(host)") { try NetworkPolicy().addresses(of: host, port: 80) }
        }
    }

    /// At play time nothing is looked up (that runs on an event loop): literals and `localhost`
    /// names are refused at once; other names wait for the connection, which checks them.
    @Test func literalsAreRefusedWithoutALookup() throws {
        for host in ["127.0.0.1", "[::1]", "10.1.2.3", "169.254.169.254", "localhost", "a.localhost", "LOCALHOST"] {
            #expect(throws: APIError.self, "\(host)") { try NetworkPolicy().checkLiteral(host: host) }
        }
        try NetworkPolicy().checkLiteral(host: "8.8.8.8")
        try NetworkPolicy().checkLiteral(host: "media.example")
        try NetworkPolicy(allowPrivateSources: true).checkLiteral(host: "127.0.0.1")
    }

    /// TONEARM_ALLOWED_SOURCE_NETWORKS opens exactly the networks named.
    @Test func allowedNetworksOpenOnlyThemselves() throws {
        let policy = NetworkPolicy(allowedNetworks: [try #require(IPNetwork("127.0.0.2/32")), try #require(IPNetwork("192.168.7.0/24"))])
        #expect(policy.permits("127.0.0.2") && policy.permits("192.168.7.40") && policy.permits("8.8.8.8"))
        #expect(!policy.permits("127.0.0.1") && !policy.permits("192.168.8.1") && !policy.permits("::1"))
        try policy.checkLiteral(host: "127.0.0.2")
        #expect(throws: APIError.self) { try policy.checkLiteral(host: "127.0.0.1") }
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
