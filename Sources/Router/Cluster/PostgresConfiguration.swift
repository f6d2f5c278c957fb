// TONEARM_DATABASE_URL read into PostgresNIO's configuration: one per host it names.
import Foundation
import PostgresNIO

extension PostgresClient.Configuration {
    /// `postgres://user:password@host1:port1,host2:port2/database`, libpq's form for several
    /// hosts, one configuration per host in the order given (one for a URL naming one host).
    /// `target_session_attrs`, when given, must ask for the host that takes writes (`read-write`
    /// or `primary`): that is the only one the cluster uses.
    static func parse(urls text: String) throws -> [PostgresClient.Configuration] {
        guard let schemeEnd = text.range(of: "://") else { return [try parse(url: text)] }
        let scheme = text[..<schemeEnd.lowerBound]
        let rest = text[schemeEnd.upperBound...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let tail = rest[authorityEnd...]
        let (userInfo, hostList) = authority.lastIndex(of: "@").map {
            (String(authority[...$0]), authority[authority.index(after: $0)...])
        } ?? ("", authority)
        if let attributes = URLComponents(string: "postgres://x" + tail)?
            .queryItems?.first(where: { $0.name == "target_session_attrs" })?.value,
            !["read-write", "primary"].contains(attributes)
        {
            throw RouterConfigurationError(
                message: "TONEARM_DATABASE_URL asks for target_session_attrs=\(attributes); the cluster writes, so only read-write or primary")
        }
        let hosts = hostList.split(separator: ",", omittingEmptySubsequences: false)
        guard hosts.count > 1 else { return [try parse(url: text)] }
        guard hosts.count <= 16, !hosts.contains(where: \.isEmpty) else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL names an empty host, or more than 16")
        }
        return try hosts.map { try parse(url: "\(scheme)://\(userInfo)\($0)\(tail)") }
    }

    /// `postgres://user:password@host:port/database` (or `postgresql://`); a host starting with
    /// `/` (percent-encoded, or `?host=/dir`) is a Unix socket directory.
    static func parse(url text: String) throws -> PostgresClient.Configuration {
        guard let url = URLComponents(string: text), ["postgres", "postgresql"].contains(url.scheme ?? "") else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL is not a postgres://user:password@host:port/database URL")
        }
        let user = url.user ?? "postgres"
        let password = url.password
        let database = url.path.isEmpty ? nil : String(url.path.dropFirst())
        let socketDirectory = url.queryItems?.first { $0.name == "host" }?.value
        if let directory = socketDirectory, directory.hasPrefix("/") {
            let port = url.port ?? 5432
            return .init(unixSocketPath: "\(directory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        guard let host = url.host, !host.isEmpty else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL names no host")
        }
        guard let port = url.port ?? Optional(5432), (1...65535).contains(port) else {
            throw RouterConfigurationError(message: "TONEARM_DATABASE_URL has no valid port")
        }
        return .init(host: host, port: port, username: user, password: password, database: database, tls: .disable)
    }
}
