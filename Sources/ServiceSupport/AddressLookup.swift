// The numeric addresses a host name resolves to (getaddrinfo), for both processes: the engine
// checks a source's host under its policy, the Router looks up the names of trusted proxies. It
// blocks on DNS: call it on a thread that may wait.
import Foundation

/// Looks host names up.
package enum AddressLookup {
    /// Every numeric address `host` resolves to, in the resolver's order, each once; empty when
    /// it resolves to none.
    package static func numeric(_ host: String) -> [String] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &result) == 0 else { return [] }
        defer { freeaddrinfo(result) }
        var addresses: [String] = []
        var cursor = result
        while let info = cursor {
            var name = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if getnameinfo(info.pointee.ai_addr, info.pointee.ai_addrlen, &name, socklen_t(name.count), nil, 0, NI_NUMERICHOST) == 0 {
                let address = String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if !addresses.contains(address) { addresses.append(address) }
            }
            cursor = info.pointee.ai_next
        }
        return addresses
    }
}
