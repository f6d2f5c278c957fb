// TONEARM_DATABASE_URL read into PostgresNIO's configuration.
import Foundation
import PostgresNIO

extension PostgresClient.Configuration {
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
