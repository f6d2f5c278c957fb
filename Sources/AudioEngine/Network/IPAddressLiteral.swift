// Whether a URL's host is a numeric address (TLS sends no server name for those).
import Foundation

/// Whether a URL host is a numeric address (TLS sends no server name for those).
enum IPAddressLiteral {
    static func isLiteral(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return inet_pton(AF_INET, bare, &v4) == 1 || inet_pton(AF_INET6, bare, &v6) == 1
    }
}
