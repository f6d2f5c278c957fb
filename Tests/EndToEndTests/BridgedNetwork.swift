// Separate network hosts for a cluster test: one network namespace per host, each joined by a
// veth pair to one bridge on this side (which holds the test, PostgreSQL and the bots), so every
// host reaches every other, and any one can be cut off from all of them by a firewall rule
// inside it while the test still samples its engine. Addresses: 10.214.N.1 on this side,
// 10.214.N.(10 + i) for host i.
import Foundation
import TestSupport

final class BridgedNetwork: Sendable {
    struct Host: Sendable {
        let namespace: String
        let address: String
        /// What runs a command inside the host.
        var launcher: [String] { ["ip", "netns", "exec", namespace] }
    }

    let bridge: String
    /// This side's address on the bridge.
    let outside: String
    let hosts: [Host]

    init(hosts count: Int) throws {
        guard getuid() == 0 else { throw FixtureError("network namespaces need root (ip netns); run the tests as root") }
        let token = String(UInt32.random(in: 0 ... .max), radix: 36)
        let subnet = try unusedSubnet("10.214")
        bridge = "tnb\(token)"
        outside = "\(subnet).1"
        hosts = (0..<count).map { Host(namespace: "tnrm\(token)h\($0)", address: "\(subnet).\(10 + $0)") }
        try Self.ip(["link", "add", bridge, "type", "bridge"])
        do {
            try Self.ip(["addr", "add", "\(outside)/24", "dev", bridge])
            try Self.ip(["link", "set", bridge, "up"])
            for (index, host) in hosts.enumerated() {
                let (near, far) = ("tnv\(token)\(index)", "tnw\(token)\(index)")
                try Self.ip(["netns", "add", host.namespace])
                try Self.ip(["link", "add", near, "type", "veth", "peer", "name", far])
                try Self.ip(["link", "set", far, "netns", host.namespace])
                try Self.ip(["link", "set", near, "master", bridge])
                try Self.ip(["link", "set", near, "up"])
                for arguments in [["addr", "add", "\(host.address)/24", "dev", far], ["link", "set", far, "up"], ["link", "set", "lo", "up"]] {
                    try Self.ip(["netns", "exec", host.namespace, "ip"] + arguments)
                }
            }
        } catch {
            remove()
            throw error
        }
    }

    /// Cuts host `index` off from every other host, PostgreSQL and the bots: nothing leaves or
    /// reaches it but on its own loopback (its engine and Router still talk) and on `open` ports
    /// it listens on (its engine's control port, for the test's samples). Open connections are
    /// not closed: their packets are dropped, as a cut cable would.
    func cut(_ index: Int, open ports: [Int] = []) throws {
        let allowIn = ports.map { "tcp dport \($0) accept" }.joined(separator: "; ")
        let allowOut = ports.map { "tcp sport \($0) accept" }.joined(separator: "; ")
        let rules = """
            table inet tonearm_cut {
                chain in { type filter hook input priority 0; iifname "lo" accept; \(allowIn)\(ports.isEmpty ? "" : ";") drop; }
                chain out { type filter hook output priority 0; oifname "lo" accept; \(allowOut)\(ports.isEmpty ? "" : ";") drop; }
            }
            """
        let file = NSTemporaryDirectory() + "tonearm-cut-\(hosts[index].namespace).nft"
        try rules.write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try runTool("ip", ["netns", "exec", hosts[index].namespace, "nft", "-f", file])
    }

    /// Mends host `index`'s cut: its packets flow again (TCP's retransmissions carry on).
    func mend(_ index: Int) throws {
        try runTool("ip", ["netns", "exec", hosts[index].namespace, "nft", "delete", "table", "inet", "tonearm_cut"])
    }

    /// Removes the hosts (their veth pairs go with them) and the bridge; processes started in
    /// them must be gone. Again does nothing.
    func remove() {
        for host in hosts { try? Self.ip(["netns", "del", host.namespace]) }
        try? Self.ip(["link", "del", bridge])
    }

    deinit { remove() }

    private static func ip(_ arguments: [String]) throws {
        try runTool("ip", arguments)
    }
}
