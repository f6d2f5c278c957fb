// Who a request comes from (X-Forwarded-For only through trusted proxies) and the per-address
// identity limit, without a server.
import Hummingbird
import HTTPTypes
import NIOCore
import ServiceSupport
import Testing

@testable import TonearmRouter

@Suite struct ClientLimitsTests {
    func request(forwardedFor: [String]) -> Request {
        var head = HTTPRequest(method: .post, scheme: "http", authority: "tonearm", path: "/api/identity")
        for value in forwardedFor { head.headerFields.append(.init(name: .init("X-Forwarded-For")!, value: value)) }
        return Request(head: head, body: .init(buffer: ByteBuffer()))
    }

    func peer(_ ip: String) throws -> SocketAddress { try SocketAddress(ipAddress: ip, port: 40000) }

    @Test func networksMatchTheirAddressesOnly() throws {
        let v4 = try #require(IPNetwork("172.30.77.0/24"))
        #expect(v4.contains("172.30.77.10") && v4.contains("::ffff:172.30.77.200"))
        #expect(!v4.contains("172.30.78.1") && !v4.contains("garbage"))
        let one = try #require(IPNetwork("10.1.2.3"))
        #expect(one.contains("10.1.2.3") && !one.contains("10.1.2.4"))
        let v6 = try #require(IPNetwork("2001:db8::/32"))
        #expect(v6.contains("2001:db8:ffff::1") && !v6.contains("2001:db9::1"))
        #expect(try #require(IPNetwork("0.0.0.0/0")).contains("8.8.8.8"))
        for bad in ["", "10.0.0.0/33", "::/129", "host.example", "10.0.0.0/-1", "10.0.0.0/8/8", "1.2.3"] {
            #expect(IPNetwork(bad) == nil, "accepted \(bad)")
        }
        #expect(throws: IPNetworkListError.self) { try IPNetwork.list("10.0.0.0/8, nonsense", setting: "X") }
        #expect(try IPNetwork.list(" 10.0.0.0/8 ,, ::1 ", setting: "X").count == 2)
    }

    @Test func forwardedForCountsOnlyFromATrustedProxy() throws {
        let untrusted = ClientAddress(trustedProxies: TrustedProxies())
        #expect(untrusted.of(request(forwardedFor: ["9.9.9.9"]), peer: try peer("203.0.113.5")) == "203.0.113.5")
        let proxied = ClientAddress(trustedProxies: TrustedProxies(networks: [try #require(IPNetwork("172.30.77.10"))]))
        // The proxy appended the address it saw; what the client wrote before it is ignored.
        #expect(proxied.of(request(forwardedFor: ["1.1.1.1, 198.51.100.7"]), peer: try peer("172.30.77.10")) == "198.51.100.7")
        #expect(proxied.of(request(forwardedFor: ["1.1.1.1", "198.51.100.7"]), peer: try peer("172.30.77.10")) == "198.51.100.7")
        // A chain of trusted proxies is walked past; garbage ends the walk at the proxy itself.
        let chain = ClientAddress(trustedProxies: TrustedProxies(networks: [try #require(IPNetwork("172.30.77.0/24"))]))
        #expect(chain.of(request(forwardedFor: ["198.51.100.7, 172.30.77.3"]), peer: try peer("172.30.77.10")) == "198.51.100.7")
        #expect(chain.of(request(forwardedFor: ["not-an-ip"]), peer: try peer("172.30.77.10")) == "172.30.77.10")
        #expect(chain.of(request(forwardedFor: []), peer: try peer("172.30.77.10")) == "172.30.77.10")
        // The same header from a peer outside the trusted network is not believed.
        #expect(chain.of(request(forwardedFor: ["198.51.100.7"]), peer: try peer("203.0.113.5")) == "203.0.113.5")
    }

    @Test func aProxyNamedByHostIsTrustedAtTheAddressesItHasNow() async throws {
        let proxies = try TrustedProxies.parse("10.9.0.0/16, localhost")
        #expect(proxies.names == ["localhost"] && proxies.networks.count == 1)
        let address = ClientAddress(trustedProxies: proxies)
        let forwarded = request(forwardedFor: ["198.51.100.7"])
        // Before the name is looked up, the proxy is a stranger like any other.
        #expect(address.of(forwarded, peer: try peer("127.0.0.1")) == "127.0.0.1")
        let found = await proxies.refresh()
        #expect(found.contains { $0.contains("127.0.0.1") }, "\(found)")
        #expect(address.of(forwarded, peer: try peer("127.0.0.1")) == "198.51.100.7")
        #expect(address.of(forwarded, peer: try peer("10.9.3.4")) == "198.51.100.7")
        #expect(address.of(forwarded, peer: try peer("10.10.3.4")) == "10.10.3.4")
        // A name that does not resolve trusts nobody.
        let gone = try TrustedProxies.parse("no-such-proxy.invalid")
        #expect(await gone.refresh().isEmpty)
        #expect(ClientAddress(trustedProxies: gone).of(forwarded, peer: try peer("127.0.0.1")) == "127.0.0.1")
        for bad in ["https://caddy", "a..b", "-x", "caddy:443", "10.0.0.0/33"] {
            #expect(throws: RouterConfigurationError.self, "accepted \(bad)") { try TrustedProxies.parse(bad) }
        }
    }

    @Test func aBurstThenTheRateThenRefusalsWithAWait() {
        let limiter = RateLimiter(perMinute: 6, burst: 3)
        let start = ContinuousClock.now
        for _ in 0..<3 { #expect(limiter.admit("a", now: start) == nil) }
        let wait = limiter.admit("a", now: start)
        #expect(wait != nil && wait! > .seconds(9) && wait! <= .seconds(10), "\(String(describing: wait))")
        #expect(limiter.admit("b", now: start) == nil, "another address has its own bucket")
        #expect(limiter.admit("a", now: start + .seconds(10)) == nil, "one more after 10 s at 6 a minute")
        #expect(limiter.admit("a", now: start + .seconds(10)) != nil)
    }

    @Test func theTableStaysBounded() {
        let limiter = RateLimiter(perMinute: 1, burst: 2, maxKeys: 100)
        let start = ContinuousClock.now
        for n in 0..<1_000 { _ = limiter.admit("client-\(n)", now: start) }
        #expect(limiter.trackedKeys <= 100, "\(limiter.trackedKeys) keys remembered")
        // Still limits a heavy client after the churn.
        #expect(limiter.admit("heavy", now: start) == nil && limiter.admit("heavy", now: start) == nil)
        #expect(limiter.admit("heavy", now: start) != nil)
    }
}
