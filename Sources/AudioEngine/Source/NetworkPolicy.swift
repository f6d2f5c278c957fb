// Which hosts the engine may fetch from. By default only public addresses: a play request must
// not become a way to reach the engine's own loopback services or the private network.
import Foundation

/// Refuses loopback, private, link-local and other non-public addresses unless allowed.
package struct NetworkPolicy: Sendable {
    var allowPrivateSources = false

    package init(allowPrivateSources: Bool = false) { self.allowPrivateSources = allowPrivateSources }

    /// Resolves `host` and throws 422 if any address it resolves to is not public.
    func check(host: String) throws(ControlError) {
        guard !allowPrivateSources else { return }
        let addresses = Self.resolve(host)
        guard !addresses.isEmpty else {
            throw .unprocessable("source_unreachable", "the host \"\(host)\" does not resolve to any address")
        }
        for address in addresses where !Self.isPublic(address) {
            throw .unprocessable(
                "private_address",
                "\"\(host)\" resolves to \(address), a loopback, private or link-local address; only public hosts are accepted (TONEARM_ALLOW_PRIVATE_SOURCES=1 allows them)")
        }
    }

    /// The numeric addresses `host` resolves to.
    static func resolve(_ host: String) -> [String] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard getaddrinfo(bare, nil, &hints, &result) == 0 else { return [] }
        defer { freeaddrinfo(result) }
        var addresses: [String] = []
        var cursor = result
        while let info = cursor {
            var name = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(info.pointee.ai_addr, info.pointee.ai_addrlen, &name, socklen_t(name.count), nil, 0, NI_NUMERICHOST) == 0 {
                addresses.append(name.withUnsafeBufferPointer { String(cString: $0.baseAddress!) })
            }
            cursor = info.pointee.ai_next
        }
        return addresses
    }

    /// Whether a numeric IPv4 or IPv6 address is globally routable.
    static func isPublic(_ address: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, address, &v4) == 1 {
            let b = withUnsafeBytes(of: v4.s_addr) { Array($0) }
            switch (b[0], b[1]) {
            case (0, _), (10, _), (127, _): return false
            case (100, 64...127): return false  // carrier-grade NAT
            case (169, 254): return false  // link-local
            case (172, 16...31): return false
            case (192, 168): return false
            case (198, 18...19): return false  // benchmarking
            case (224...255, _): return false  // multicast, reserved, broadcast
            default: return true
            }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, address.split(separator: "%").first.map(String.init) ?? address, &v6) == 1 {
            let b = withUnsafeBytes(of: v6) { Array($0) }
            if b.allSatisfy({ $0 == 0 }) || (b[0..<15].allSatisfy { $0 == 0 } && b[15] == 1) { return false }
            if b[0] == 0xFE && (b[1] & 0xC0) == 0x80 { return false }  // fe80::/10 link-local
            if (b[0] & 0xFE) == 0xFC { return false }  // fc00::/7 unique local
            if b[0] == 0xFF { return false }  // multicast
            if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF {  // ::ffff:a.b.c.d
                return isPublic("\(b[12]).\(b[13]).\(b[14]).\(b[15])")
            }
            return true
        }
        return false
    }
}
