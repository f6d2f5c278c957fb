// The proxies whose X-Forwarded-For the Router believes (TONEARM_TRUSTED_PROXIES): networks written
// as numbers, and host names — a compose service such as `https` — looked up now and again, since a
// container's address changes when it is recreated. A name that does not resolve (the proxy is not
// running) trusts nobody until it does.
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle
import ServiceSupport
import Synchronization

/// The trusted proxies: fixed networks plus the current addresses of named hosts.
final class TrustedProxies: Sendable {
    let networks: [IPNetwork]
    let names: [String]
    private let resolved = Mutex<[IPNetwork]>([])

    init(networks: [IPNetwork] = [], names: [String] = []) {
        self.networks = networks
        self.names = names
    }

    /// Parses `TONEARM_TRUSTED_PROXIES`: comma-separated addresses, networks or host names.
    static func parse(_ text: String) throws(RouterConfigurationError) -> TrustedProxies {
        var networks: [IPNetwork] = []
        var names: [String] = []
        for entry in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            if let network = IPNetwork(entry) {
                networks.append(network)
            } else if isHostName(entry) {
                names.append(entry.lowercased())
            } else {
                throw RouterConfigurationError(
                    message: "TONEARM_TRUSTED_PROXIES: \"\(entry)\" is not an address, a network (a.b.c.d/n, IPv6/n) or a host name")
            }
        }
        return TrustedProxies(networks: networks, names: names)
    }

    /// Whether the numeric address belongs to a trusted proxy.
    func contains(_ address: String) -> Bool {
        networks.contains { $0.contains(address) } || resolved.withLock { $0.contains { $0.contains(address) } }
    }

    /// Looks the names up again (off the async threads: the system resolver blocks).
    @discardableResult
    func refresh() async -> [IPNetwork] {
        guard !names.isEmpty else { return [] }
        let names = self.names
        let addresses = (try? await NIOThreadPool.singleton.runIfActive { names.flatMap(Self.lookUp) }) ?? []
        resolved.withLock { $0 = addresses }
        return addresses
    }

    /// The current addresses of one name, each as a single-address network.
    static func lookUp(_ name: String) -> [IPNetwork] {
        var found: [IPNetwork] = []
        for network in AddressLookup.numeric(name).compactMap(IPNetwork.init) where !found.contains(network) {
            found.append(network)
        }
        return found
    }

    static func isHostName(_ text: String) -> Bool {
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        return text.utf8.count <= 253 && !labels.isEmpty
            && labels.allSatisfy { label in
                (1...63).contains(label.utf8.count) && label.first != "-" && label.last != "-"
                    && label.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-") }
            }
    }
}

/// Looks the trusted proxies' names up at start and every `every` after, until shutdown.
struct TrustedProxyRefresh: Service {
    let proxies: TrustedProxies
    var every: Duration = .seconds(15)
    let logger: Logger

    func run() async throws {
        guard !proxies.names.isEmpty else { return }
        await cancelWhenGracefulShutdown {
            var last: [IPNetwork]? = nil
            while !Task.isCancelled {
                let now = await proxies.refresh()
                if now != last {
                    logger.info(
                        "trusted proxies looked up",
                        metadata: ["names": "\(proxies.names.joined(separator: ","))", "addresses": "\(now.map(\.description))"])
                    last = now
                }
                try? await Task.sleep(for: every)
            }
        }
    }
}
