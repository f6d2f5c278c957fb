// A separate network host on this machine for a test: a network namespace (`ip netns`, root only)
// joined to this one by a veth pair, with a resolv.conf of its own, so a test can run the engine
// against a name server it controls. Addresses: 10.213.N.1 on this side, 10.213.N.2 and .3 inside.
import Foundation
import TestSupport

final class NetworkNamespace: Sendable {
    let name: String
    /// This side's address on the link.
    let outside: String
    /// The namespace's two addresses on the link.
    let inside: String
    let second: String

    /// Makes the namespace; `nameserver` is what its resolv.conf names.
    init(nameserver: String = "127.0.0.53") throws {
        guard getuid() == 0 else { throw FixtureError("a network namespace needs root (ip netns); run the tests as root") }
        let token = String(UInt32.random(in: 0 ... .max), radix: 36)
        name = "tnrm\(token)"
        let subnet = try unusedSubnet("10.213")
        (outside, inside, second) = ("\(subnet).1", "\(subnet).2", "\(subnet).3")
        let (host, peer) = ("tnh\(token)", "tnp\(token)")
        try Self.ip(["netns", "add", name])
        do {
            try Self.ip(["link", "add", host, "type", "veth", "peer", "name", peer])
            try Self.ip(["link", "set", peer, "netns", name])
            try Self.ip(["addr", "add", "\(outside)/24", "dev", host])
            try Self.ip(["link", "set", host, "up"])
            for arguments in [
                ["addr", "add", "\(inside)/24", "dev", peer], ["addr", "add", "\(second)/24", "dev", peer],
                ["link", "set", peer, "up"], ["link", "set", "lo", "up"],
            ] {
                try Self.ip(["netns", "exec", name, "ip"] + arguments)
            }
            // `ip netns exec` mounts /etc/netns/<name>/resolv.conf over /etc/resolv.conf.
            try FileManager.default.createDirectory(atPath: "/etc/netns/\(name)", withIntermediateDirectories: true)
            try "nameserver \(nameserver)\n".write(toFile: "/etc/netns/\(name)/resolv.conf", atomically: true, encoding: .utf8)
        } catch {
            try? Self.ip(["netns", "del", name])
            throw error
        }
    }

    /// What runs a command inside the namespace.
    var launcher: [String] { ["ip", "netns", "exec", name] }

    /// Removes the namespace (and the veth pair with it); processes started in it must be gone.
    deinit {
        try? Self.ip(["netns", "del", name])
        try? FileManager.default.removeItem(atPath: "/etc/netns/\(name)")
    }

    private static func ip(_ arguments: [String]) throws {
        try runTool("ip", arguments)
    }
}

/// `Tests/Fixtures/rebinding_dns.py` inside a namespace: each `.test` name answers `first` once,
/// then `then`.
final class RebindingNameServer: @unchecked Sendable {
    // @unchecked: Process is only started and killed.
    private let process: Process

    init(in namespace: NetworkNamespace, first: String, then: String) throws {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/rebinding_dns.py").path
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = namespace.launcher + ["python3", script, "--first", first, "--then", then]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        guard line.hasPrefix("ready") else { throw FixtureError("the name server did not start: \(line)") }
    }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// A /24 under `prefix` (as "10.213.N") that no interface of this host uses: suites run two at a
/// time (Tests/run.sh), and two tests' links must not share a subnet.
func unusedSubnet(_ prefix: String) throws -> String {
    let used = try runTool("ip", ["-o", "-4", "addr", "show"])
    let free = (1...250).map { "\(prefix).\($0)" }.filter { !used.contains(" \($0).") }
    guard let subnet = free.randomElement() else { throw FixtureError("every subnet under \(prefix) is in use") }
    return subnet
}
