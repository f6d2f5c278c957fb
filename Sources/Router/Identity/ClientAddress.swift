// Who a request comes from, for limits that count per client: the connection's peer address, or,
// when that peer is a proxy the operator trusts (TONEARM_TRUSTED_PROXIES), the nearest address in
// X-Forwarded-For that is not itself a trusted proxy. A client cannot choose its own address by
// sending the header: from anyone but a trusted proxy it is ignored.
import Foundation
import Hummingbird
import NIOCore
import ServiceSupport

/// Finds the client address of a request.
struct ClientAddress: Sendable {
    let trustedProxies: TrustedProxies

    /// The client's numeric address; "unknown" when the connection has none (a Unix socket).
    func of(_ request: Request, peer: SocketAddress?) -> String {
        guard let peerAddress = peer?.ipAddress else { return "unknown" }
        guard isTrusted(peerAddress) else { return peerAddress }
        // Proxies append the address they saw: read from the right, past every trusted hop.
        let hops = request.headers[values: .init("X-Forwarded-For")!]
            .flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: .whitespaces) }
        for hop in hops.reversed() {
            guard IPNetwork(hop) != nil else { return peerAddress }  // garbage: trust nothing further
            if !isTrusted(hop) { return hop }
        }
        return peerAddress
    }

    private func isTrusted(_ address: String) -> Bool {
        trustedProxies.contains(address)
    }
}
