// Which addresses the engine may fetch from. By default only public ones: a play request must not
// become a way to reach the engine's own loopback services or the private network. The check is
// made where the connection is made (`Network/SourceConnector`), on every address of every hop —
// redirects, playlist segments — so a name that answers differently the second time, or a public
// URL that redirects inward, gets no further than the first.
import Foundation
import NIOCore
import ServiceSupport

/// Refuses loopback, private, link-local and other non-public addresses unless allowed.
package struct NetworkPolicy: Sendable {
    var allowPrivateSources = false
    /// Networks allowed besides the public ones (TONEARM_ALLOWED_SOURCE_NETWORKS): a NAS on the LAN.
    var allowedNetworks: [IPNetwork] = []

    package init(allowPrivateSources: Bool = false, allowedNetworks: [IPNetwork] = []) {
        self.allowPrivateSources = allowPrivateSources
        self.allowedNetworks = allowedNetworks
    }

    /// Whether a numeric address may be connected to.
    func permits(_ address: String) -> Bool {
        allowPrivateSources || Self.isPublic(address) || allowedNetworks.contains { $0.contains(address) }
    }

    /// The refusal for `host` reaching `address`, worded for the listener.
    static func refusal(host: String, address: String, hop: String? = nil) -> APIError {
        .unprocessable(
            "private_address",
            "\"\(host)\"\(hop.map { " (\($0))" } ?? "") resolves to \(address), a loopback, private or link-local address; "
                + "only public hosts are accepted (TONEARM_ALLOW_PRIVATE_SOURCES=1 or TONEARM_ALLOWED_SOURCE_NETWORKS allow others)")
    }

    /// At play time, without looking anything up (this runs on an event loop): refuses hosts that
    /// are literal addresses outside the policy, and `localhost` names (RFC 6761). Names are
    /// checked when they are connected to.
    func checkLiteral(host: String) throws(APIError) {
        guard !allowPrivateSources else { return }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let lower = bare.lowercased()
        if lower == "localhost" || lower.hasSuffix(".localhost") || lower == "localhost." {
            guard allowedNetworks.contains(where: { $0.contains("127.0.0.1") }) else {
                throw Self.refusal(host: host, address: "127.0.0.1")
            }
            return
        }
        var v4 = in_addr(), v6 = in6_addr()
        let numeric = inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
        if numeric && !permits(bare) { throw Self.refusal(host: host, address: bare) }
    }

    /// Every address `host` resolves to, for a connection to `port`; throws if any is refused
    /// (so a name with one public and one private answer is refused whole) or none exists.
    /// Blocks on DNS: call it off event loops and the cooperative pool.
    func addresses(of host: String, port: Int) throws(APIError) -> [SocketAddress] {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        let numeric = AddressLookup.numeric(bare)
        guard !numeric.isEmpty else {
            throw .unprocessable("source_unreachable", "the host \"\(host)\" does not resolve to any address")
        }
        if let refused = numeric.first(where: { !permits($0) }) { throw Self.refusal(host: host, address: refused) }
        return numeric.compactMap { try? SocketAddress(ipAddress: $0, port: port) }
    }

    /// `addresses(of:port:)` on a thread of its own, for async callers (yt-dlp's page URLs).
    func check(host: String) async throws(APIError) {
        let policy = self
        let result = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                continuation.resume(returning: Result { () throws(APIError) in _ = try policy.addresses(of: host, port: 0) })
            }
        }
        try result.get()
    }

    /// Whether a numeric IPv4 or IPv6 address is globally routable.
    static func isPublic(_ address: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 {
            return isPublic(v4: withUnsafeBytes(of: v4.s_addr) { Array($0) })
        }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, address.split(separator: "%").first.map(String.init) ?? address, &v6) == 1 else {
            return false
        }
        let b = withUnsafeBytes(of: v6) { Array($0) }
        if b[0..<10].allSatisfy({ $0 == 0 }) && ((b[10] == 0xFF && b[11] == 0xFF) || (b[10] == 0 && b[11] == 0)) {
            // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible), :: and ::1 among them.
            return isPublic(v4: Array(b[12..<16]))
        }
        if b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xFF && b[3] == 0x9B && b[4..<12].allSatisfy({ $0 == 0 }) {
            return isPublic(v4: Array(b[12..<16]))  // 64:ff9b::/96, NAT64 of an IPv4 address
        }
        if b[0] == 0x20 && b[1] == 0x02 { return isPublic(v4: Array(b[2..<6])) }  // 2002::/16, 6to4
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x00 && b[3] == 0x00 { return false }  // Teredo
        if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return false }  // documentation
        if b[0] == 0x01 && b[1] == 0x00 && b[2..<8].allSatisfy({ $0 == 0 }) { return false }  // 100::/64, discard
        if b[0] == 0xFE && (b[1] & 0xC0) == 0x80 { return false }  // fe80::/10 link-local
        if b[0] == 0xFE && (b[1] & 0xC0) == 0xC0 { return false }  // fec0::/10 site-local
        if (b[0] & 0xFE) == 0xFC { return false }  // fc00::/7 unique local
        if b[0] == 0xFF { return false }  // multicast
        return true
    }

    private static func isPublic(v4 b: [UInt8]) -> Bool {
        switch (b[0], b[1], b[2]) {
        case (0, _, _), (10, _, _), (127, _, _): return false
        case (100, 64...127, _): return false  // carrier-grade NAT
        case (169, 254, _): return false  // link-local
        case (172, 16...31, _): return false
        case (192, 0, 0), (192, 0, 2): return false  // IETF protocol assignments, documentation
        case (192, 168, _): return false
        case (198, 18...19, _): return false  // benchmarking
        case (198, 51, 100), (203, 0, 113): return false  // documentation
        case (224...255, _, _): return false  // multicast, reserved, broadcast
        default: return true
        }
    }
}
