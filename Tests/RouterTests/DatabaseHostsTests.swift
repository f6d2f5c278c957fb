// A database URL naming several hosts, and the statements following the one that takes writes:
// two real PostgreSQL servers, one of them read-only, swapped while the test runs, then one
// stopped.
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import TonearmRouter

@Suite(.serialized, .timeLimit(.minutes(2))) struct DatabaseHostsTests {
    @Test func aURLNamingSeveralHostsGivesOneConfigurationEach() throws {
        let several = try PostgresClient.Configuration.parse(
            urls: "postgres://tonearm:secret@db-a:5433,db-b,10.0.0.3:6000/cluster?target_session_attrs=read-write")
        #expect(several.map(\.host) == ["db-a", "db-b", "10.0.0.3"])
        #expect(several.map(\.port) == [5433, 5432, 6000])
        #expect(several.allSatisfy { $0.username == "tonearm" && $0.password == "secret" && $0.database == "cluster" })
        let one = try PostgresClient.Configuration.parse(urls: "postgres://tonearm@db:5433/cluster")
        #expect(one.map(\.host) == ["db"] && one.map(\.port) == [5433])
        for wrong in [
            "postgres://u@a,b/db?target_session_attrs=read-only", "postgres://u@a,,b/db", "postgres://u@a,b:99999/db",
            "mysql://u@a,b/db",
        ] {
            #expect(throws: RouterConfigurationError.self, "\(wrong)") { try PostgresClient.Configuration.parse(urls: wrong) }
        }
    }

    @Test(.enabled(if: PostgresServer.binaries != nil)) func statementsGoToTheHostThatTakesWrites() async throws {
        let (first, second) = (try PostgresServer(), try PostgresServer())
        defer { first.stop(); second.stop() }
        try first.sql("CREATE TABLE mark (name text)")
        try second.sql("CREATE TABLE mark (name text)")
        try readOnly(first, true)
        let url = "postgres://tonearm@127.0.0.1:\(first.port),127.0.0.1:\(second.port)/postgres"
        let hosts = try DatabaseHosts(url: url, connectTimeout: .seconds(1), logger: Logger(label: "test"))
        let running = Task { await hosts.run() }
        defer { running.cancel() }
        #expect(hosts.count == 2)
        func write(_ name: String) async throws {
            try await hosts.run(within: .seconds(2)) { connection in
                try await connection.query("INSERT INTO mark VALUES (\(name))", logger: Logger(label: "test"))
            }
        }
        try await write("one")
        #expect(try first.sql("SELECT count(*) FROM mark") == "0" && second.sql("SELECT string_agg(name, ',') FROM mark") == "one")

        // A failover: the second host is now the standby, the first the primary. The statement
        // that meets the read-only host fails; the next one finds the primary.
        try readOnly(second, true)
        try readOnly(first, false)
        await #expect(throws: (any Error).self) { try await write("refused") }
        try await write("two")
        #expect(try first.sql("SELECT string_agg(name, ',') FROM mark") == "two")

        // The primary's host is gone: statements fail until another host takes writes.
        first.stop()
        await #expect(throws: (any Error).self) { try await write("lost") }
        await #expect(throws: NoPrimaryError.self) { try await write("none") }
        try readOnly(second, false)
        try await write("three")
        #expect(try second.sql("SELECT string_agg(name, ',' ORDER BY name) FROM mark") == "one,three")
    }

    /// A host that stops answering, its connections open (cut off, not gone): the statement on
    /// it fails at its deadline, and the next one finds the other host at once. The search asks
    /// the silent host too, on a connection the pool kept; that question must not hold it.
    @Test(.enabled(if: PostgresServer.binaries != nil)) func aHostThatFallsSilentDoesNotHoldTheSearch() async throws {
        let (first, second) = (try PostgresServer(), try PostgresServer())
        defer { first.freeze(false); first.stop(); second.stop() }
        for server in [first, second] { try server.sql("CREATE TABLE mark (name text)") }
        try readOnly(second, true)
        let url = "postgres://tonearm@127.0.0.1:\(first.port),127.0.0.1:\(second.port)/postgres"
        let hosts = try DatabaseHosts(url: url, connectTimeout: .seconds(1), logger: Logger(label: "test"))
        let running = Task { await hosts.run() }
        defer { running.cancel() }
        func write(_ name: String, within limit: Duration = .seconds(2)) async throws {
            try await hosts.run(within: limit) { connection in
                try await connection.query("INSERT INTO mark VALUES (\(name))", logger: Logger(label: "test"))
            }
        }
        // Two at once: the pool keeps two connections to the first host.
        async let one: Void = write("one")
        async let two: Void = write("two")
        _ = try await (one, two)
        first.freeze(true)
        try readOnly(second, false)
        let started = ContinuousClock.now
        await #expect(throws: TimeoutError.self) { try await write("lost", within: .seconds(1)) }
        try await write("three", within: .seconds(2))
        let took = ContinuousClock.now - started
        #expect(took < .milliseconds(2_500), "the search waited for the silent host: \(took)")
        #expect(try second.sql("SELECT string_agg(name, ',') FROM mark") == "three")
    }

    /// What pg_auto_failover does to a standby just promoted, or to a demoted primary.
    private func readOnly(_ server: PostgresServer, _ on: Bool) throws {
        _ = try server.sql("ALTER SYSTEM SET default_transaction_read_only = \(on ? "on" : "off")")
        _ = try server.sql("SELECT pg_reload_conf()")
        // A reload reaches the server's sessions at their next statement; a new one sees it at once.
        for _ in 0..<50 where try server.sql("SHOW default_transaction_read_only") != (on ? "on" : "off") {
            Thread.sleep(forTimeInterval: 0.05)
        }
    }
}
