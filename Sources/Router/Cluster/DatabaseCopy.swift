// `Router migrate-database`: copies a single pair's SQLite sessions into a cluster's PostgreSQL,
// so a deployment can grow from one pair without losing a queue. A session already in PostgreSQL
// is left as it is (the copy can be run again); nothing is owned after the copy: each session is
// placed when it is next used, and one that was playing is not played by itself (its pair
// stopped with it), but stays at its track and position for `resume`.
import Foundation
import Logging
import PostgresNIO
import ServiceSupport
import WireProtocol

package enum DatabaseCopy {
    package struct Outcome: Sendable {
        package var copied = 0
        package var present = 0
        package var unreadable = 0
    }

    package static func copy(from sqlitePath: String, to url: String, logger: Logger) async throws -> Outcome {
        guard FileManager.default.fileExists(atPath: sqlitePath) else {
            throw RouterConfigurationError(message: "\(sqlitePath): no such SQLite file")
        }
        let source = try SessionDatabase(path: sqlitePath)
        let rows = try await source.loadAllJSON()
        let hosts = try DatabaseHosts(url: url, logger: logger)
        return try await withThrowingTaskGroup(of: Outcome?.self) { group in
            group.addTask {
                await hosts.run()
                return nil
            }
            defer { group.cancelAll() }
            let database = ClusterDatabase(hosts: hosts, pairID: "migrate-database", logger: logger)
            try await database.migrate()
            var outcome = Outcome()
            for (raw, json) in rows {
                guard let id = try? SessionID(raw), var snapshot = try? JSONDecoder().decode(SessionSnapshot.self, from: Data(json.utf8))
                else {
                    outcome.unreadable += 1
                    continue
                }
                // Its pair's play ended with the pair: stored stopped, at its track and position.
                (snapshot, _) = snapshot.movedToAnotherPair()
                let stored = String(decoding: try JSONCoding.encoder.encode(snapshot), as: UTF8.self)
                if try await database.importSnapshot(id, json: stored, active: false) {
                    outcome.copied += 1
                } else {
                    outcome.present += 1
                }
            }
            return outcome
        }
    }
}
