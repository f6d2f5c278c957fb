// Address ranges written as operators write them (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.7`),
// for the settings that name networks: the engine's extra allowed source networks, the Router's
// trusted proxies. IPv4 addresses are held as IPv4-mapped IPv6, so one comparison serves both.
import Foundation

/// One IPv4 or IPv6 network: an address and a prefix length.
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    /// 16 bytes; an IPv4 network is stored IPv4-mapped (`::ffff:a.b.c.d`) with its prefix + 96.
    let bytes: [UInt8]
    let prefixLength: Int
    public let description: String

    /// Parses `a.b.c.d`, `a.b.c.d/n`, an IPv6 address or `addr/n`; nil for anything else.
    public init?(_ text: String) {
        let parts = text.trimmingCharacters(in: .whitespaces).split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), let (bytes, isV4) = Self.parse(String(parts[0])) else { return nil }
        let maximum = isV4 ? 32 : 128
        var length = maximum
        if parts.count == 2 {
            guard let given = Int(parts[1]), (0...maximum).contains(given) else { return nil }
            length = given
        }
        self.prefixLength = isV4 ? length + 96 : length
        self.bytes = Self.masked(bytes, self.prefixLength)
        self.description = text.trimmingCharacters(in: .whitespaces)
    }

    /// Whether the numeric address `address` (IPv4 or IPv6, a zone suffix ignored) is inside.
    public func contains(_ address: String) -> Bool {
        guard let (other, _) = Self.parse(address) else { return false }
        return Self.masked(other, prefixLength) == bytes
    }

    /// A comma-separated list of networks; throws a sentence naming the first entry that is not one.
    public static func list(_ text: String, setting: String) throws(IPNetworkListError) -> [IPNetwork] {
        var networks: [IPNetwork] = []
        for entry in text.split(separator: ",") {
            let trimmed = entry.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            guard let network = IPNetwork(trimmed) else {
                throw IPNetworkListError(
                    message: "\(setting): \"\(trimmed)\" is not an address or a network (a.b.c.d, a.b.c.d/n, or IPv6 with /n)")
            }
            networks.append(network)
        }
        return networks
    }

    /// The address as 16 bytes (IPv4 mapped into IPv6) and whether it was IPv4.
    static func parse(_ text: String) -> ([UInt8], Bool)? {
        let bare = text.hasPrefix("[") && text.hasSuffix("]") ? String(text.dropFirst().dropLast()) : text
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 {
            return ([UInt8](repeating: 0, count: 10) + [0xFF, 0xFF] + withUnsafeBytes(of: v4.s_addr) { Array($0) }, true)
        }
        var v6 = in6_addr()
        let unzoned = bare.split(separator: "%", maxSplits: 1).first.map(String.init) ?? bare
        if inet_pton(AF_INET6, unzoned, &v6) == 1 { return (withUnsafeBytes(of: v6) { Array($0) }, false) }
        return nil
    }

    private static func masked(_ bytes: [UInt8], _ length: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let bits = min(max(length - index * 8, 0), 8)
            return bits == 8 ? byte : byte & ~(UInt8(0xFF) >> bits)
        }
    }
}

/// A setting that should list networks holds something else.
public struct IPNetworkListError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
