// Lavalink's API in a cluster (docs/lavalink.md "In a cluster"). Any Router answers for any
// session: a session lives in the cluster's database, and each player runs at the pair that plays
// its guild, in that Router's own `LavalinkSession` of the same id. The Router that has the
// client's WebSocket (its home) opens a feed to every other pair that runs one of its players
// (`LavalinkFeeds`) and passes their messages on. A player's row holds what a new pair needs to
// run it again after a failover or a hand-over: its voice object, its track, its volume.
import AsyncHTTPClient
import Foundation
import HTTPTypes
import Logging
import NIOCore
import NIOHTTP1
import Synchronization
import WireProtocol

final class LavalinkCluster: Sendable {
    let database: ClusterDatabase
    let relay: ClusterRelay
    let password: String
    let logger: Logger
    /// How often a pair's part of a session whose home's feed is away asks whether it is still
    /// wanted (`LavalinkNode.closed`).
    static let feedPatience: Duration = .seconds(5)

    /// A player's row to write (or to delete), in the order they were asked for.
    enum Write: Sendable {
        case save(LavalinkPlayer, LavalinkSession)
        case delete(session: String, guild: SessionID)
    }
    private let writes: AsyncStream<Write>.Continuation
    private let pending: AsyncStream<Write>

    init(relay: ClusterRelay, password: String, logger: Logger) {
        self.relay = relay
        database = relay.member.database
        self.password = password
        self.logger = logger
        (pending, writes) = AsyncStream<Write>.makeStream()
    }

    var pairID: String { relay.member.settings.pairID }

    func save(_ player: LavalinkPlayer, of session: LavalinkSession) { writes.yield(.save(player, session)) }
    func delete(_ guild: SessionID, of session: String) { writes.yield(.delete(session: session, guild: guild)) }

    /// Writes the players' rows one after the other, each as the player is when it is written,
    /// until the Router stops. A player no longer in its session is not written.
    func runWrites() async {
        for await write in pending {
            do {
                switch write {
                case .save(let player, let session):
                    guard session.player(player.guild) === player else { continue }
                    let row = Self.row(player.state.withLock { $0 })
                    try await database.saveLavalinkPlayer(session: session.id, guild: player.guild, player: row)
                case .delete(let session, let guild):
                    try await database.deleteLavalinkPlayer(session: session, guild: guild)
                }
            } catch {
                logger.warning("a Lavalink player's row was not written", metadata: ["error": "\(ClusterMember.describe(error))"])
            }
        }
    }

    // MARK: A player's row

    /// What a new pair needs to run a player again: the voice object, the track (the one asked
    /// for, else the one playing), the player's volume and Lavalink's volume filter.
    static func row(_ tracks: LavalinkPlayer.Tracks) -> String {
        var object: JSONObject = ["voice": tracks.voice, "filterVolume": tracks.filterVolume]
        if let track = tracks.pending ?? tracks.current { object["track"] = track }
        if let volume = tracks.volume { object["volume"] = volume }
        if !tracks.queued.isEmpty { object["queued"] = tracks.queued }
        return LavalinkJSON.text(object)
    }

    /// The player a row describes; its track is the one playing (the session plays on from its
    /// stored position at its new pair).
    static func tracks(_ row: String) -> LavalinkPlayer.Tracks {
        var tracks = LavalinkPlayer.Tracks()
        guard let object = LavalinkJSON.object(Array(row.utf8)) else { return tracks }
        if let voice = object["voice"] as? JSONObject { tracks.voice = voice }
        tracks.current = object["track"] as? JSONObject
        tracks.continuing = tracks.current != nil
        tracks.volume = object["volume"] as? Int
        tracks.filterVolume = object["filterVolume"] as? Double ?? 1
        tracks.queued = object["queued"] as? [JSONObject] ?? []
        return tracks
    }

    // MARK: Other pairs' players

    /// A player as the pair that runs it answers `GET …/players/{guild}` (nil: it does not).
    func view(session: String, guild: String, at address: String) async -> JSONObject? {
        var request = HTTPClientRequest(url: "\(address)/v4/sessions/\(session)/players/\(guild)")
        request.headers.add(name: "Authorization", value: password)
        request.headers.add(name: ClusterRelay.forwardedHeader.rawName, value: pairID)
        guard let response = try? await relay.http.execute(request, deadline: .now() + .seconds(5)), response.status == .ok,
            let body = try? await response.body.collect(upTo: 1 << 20)
        else { return nil }
        return LavalinkJSON.object(body.readableBytesView)
    }
}
