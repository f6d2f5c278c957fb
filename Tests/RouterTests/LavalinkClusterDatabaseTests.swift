// Lavalink's sessions and players in the cluster's database, against a real PostgreSQL: a
// session is ended only by its home (not by a pair it has left, whose resume wait ran out after
// its client resumed elsewhere), a pair's part of it is wanted while its home is heard from or it
// is kept for resuming, a client resumes only its own bot's session kept for resuming,
// a player's row names the pair that runs it last, and a pair deletes only a row it runs.
import Foundation
import Logging
import TestSupport
import Testing
import WireProtocol

@testable import TonearmRouter

@Suite(.serialized, .timeLimit(.minutes(2))) struct LavalinkClusterDatabaseTests {
    @Test(.enabled(if: ClusterDatabaseTests.postgresInstalled)) func aSessionIsEndedByItsHomeAloneAndItsPlayersFollowTheirGuild() async throws {
        try await ClusterDatabaseTests().withPairs(["a", "b", "c"]) { pairs in
            let (a, b, c) = (pairs[0], pairs[1], pairs[2])
            let guild = try SessionID("41771983423143937")
            try await a.openLavalinkSession("s", userID: "104")
            // A pair's part of it is wanted while its home is heard from, or it is kept for resuming.
            #expect(try await b.lavalinkSessionWanted("s", homeWithin: .seconds(3)) == false)
            _ = try await a.round(ClusterDatabaseTests().beat("a"), lease: .seconds(3), gap: .seconds(1), within: .seconds(2))
            #expect(try await b.lavalinkSessionWanted("s", homeWithin: .seconds(3)))
            // A heartbeat older than the window is not enough. The wait lets it age past the window for
            // sure: two round trips on loopback can take less than a millisecond.
            try await Task.sleep(for: .milliseconds(30))
            #expect(try await b.lavalinkSessionWanted("s", homeWithin: .milliseconds(10)) == false)
            // Kept for resuming only when the client asks; only its own bot resumes it.
            #expect(try await b.resumeLavalinkSession("s", userID: "104") == nil)
            #expect(try await b.configureLavalinkSession("s", resuming: true, timeout: 30) == .init(userID: "104", resuming: true, timeout: 30))
            #expect(try await b.configureLavalinkSession("t", resuming: true, timeout: nil) == nil)
            #expect(try await b.resumeLavalinkSession("s", userID: "999") == nil)

            // The player runs at b, then at c (the guild moved); b can no longer delete its row.
            try await b.saveLavalinkPlayer(session: "s", guild: guild, player: #"{"track":{"encoded":"x"}}"#)
            #expect(try await a.lavalinkPlayerPlaces(of: "s").map(\.pair) == ["b"])
            try await c.saveLavalinkPlayer(session: "s", guild: guild, player: #"{"track":{"encoded":"y"}}"#)
            try await b.deleteLavalinkPlayer(session: "s", guild: guild)
            let rows = try await a.lavalinkPlayers(of: guild)
            #expect(rows.map(\.session) == ["s"])
            #expect(rows.first?.player.contains("y") == true && rows.first?.row.userID == "104")

            // The client resumes at c: a's resume wait running out ends nothing.
            #expect(try await c.resumeLavalinkSession("s", userID: "104") != nil)
            try await a.endLavalinkSession("s")
            #expect(try await a.lavalinkSession("s") != nil)
            #expect(try await b.lavalinkSessionWanted("s", homeWithin: .milliseconds(1)))  // resuming
            try await c.endLavalinkSession("s")
            #expect(try await a.lavalinkSession("s") == nil)
            #expect(try await b.lavalinkSessionWanted("s", homeWithin: .seconds(3)) == false)
            #expect(try await a.lavalinkPlayers(of: guild).isEmpty)
            // A row for a session that is gone is not written.
            try await c.saveLavalinkPlayer(session: "s", guild: guild, player: "{}")
            #expect(try await a.lavalinkPlayers(of: guild).isEmpty)
        }
    }
}
