// The node's sessions: opened and resumed by a client's socket, ended with it or after its resume
// timeout. In a cluster (`LavalinkCluster`) each lives in the database too: any Router finds it
// there, a client resumes it at any Router, and a pair that takes a guild on runs the guild's
// players again from their rows.
import DiscordVoice
import Foundation
import HTTPTypes
import Logging
import Synchronization
import WireProtocol

extension LavalinkNode {
    /// The session a client's socket opens: the one named by `Session-Id` when it is kept for
    /// resuming (resumed), else a new one.
    func open(userID: String, resume: String?) async -> (session: LavalinkSession, resumed: Bool) {
        if let cluster, let resume, let row = try? await cluster.database.resumeLavalinkSession(resume, userID: userID) {
            let session = local(resume, userID: userID)
            _ = session.configure(resuming: row.resuming, timeout: row.timeout)
            return (session, true)
        }
        let opened = sessions.withLock { sessions -> (LavalinkSession, Bool) in
            // The old socket may not have been seen closing yet: the new one takes the session over.
            if cluster == nil, let resume, let kept = sessions[resume], kept.userID == userID, kept.resuming { return (kept, true) }
            let session = LavalinkSession(id: LavalinkSession.newID(), userID: userID)
            sessions[session.id] = session
            return (session, false)
        }
        if let cluster, !opened.1 {
            do {
                try await cluster.database.openLavalinkSession(opened.0.id, userID: userID)
            } catch {
                logger.warning(
                    "a Lavalink session is known to this Router only: the cluster's database did not answer",
                    metadata: ["lavalink.session": "\(opened.0.id)", "error": "\(ClusterMember.describe(error))"])
            }
        }
        return opened
    }

    /// This Router's session of `id`, made when it has none.
    private func local(_ id: String, userID: String) -> LavalinkSession {
        sessions.withLock { sessions in
            if let session = sessions[id] { return session }
            let session = LavalinkSession(id: id, userID: userID)
            sessions[id] = session
            return session
        }
    }

    /// The session `id`: this Router's, or in a cluster one the database knows, made here to run
    /// players of it (it keeps their messages until its home's feed takes them, `LavalinkFeeds`).
    func session(_ id: String) async throws(LavalinkError) -> LavalinkSession {
        if let session = sessions.withLock({ $0[id] }) { return session }
        guard let cluster else { throw .notFound("Session not found") }
        let row: ClusterDatabase.LavalinkSessionRow?
        do {
            row = try await cluster.database.lavalinkSession(id)
        } catch {
            throw LavalinkError(status: .serviceUnavailable, message: "the cluster's database does not answer", code: "cluster_unavailable")
        }
        guard let row else { throw .notFound("Session not found") }
        return part(of: id, row: row)
    }

    /// This pair's part of a cluster's session: it queues its players' messages for the home's
    /// feed, and ends when no feed comes (`closed`).
    private func part(of id: String, row: ClusterDatabase.LavalinkSessionRow) -> LavalinkSession {
        let (session, made) = sessions.withLock { sessions -> (LavalinkSession, Bool) in
            if let session = sessions[id] { return (session, false) }
            let session = LavalinkSession(id: id, userID: row.userID)
            session.becomePart()
            sessions[id] = session
            return (session, true)
        }
        if made { Task { await closed(session, generation: session.lastGeneration, ended: false) } }
        return session
    }

    var allSessions: [LavalinkSession] { sessions.withLock { Array($0.values) } }

    /// The socket of `generation` closed (a client's, or in a cluster a home's feed, `ended` when
    /// its session is over): the session waits `timeout` s for its client when it asked for
    /// resuming, then (or at once) ends here with its players; at its home, for the whole cluster.
    /// A pair's part of a session waits for its home's feed for as long as the session is wanted
    /// (`lavalinkSessionWanted`: a feed that failed comes back), at most its resume timeout.
    func closed(_ session: LavalinkSession, generation: UInt64, ended: Bool = false) async {
        guard var (resuming, timeout) = session.detach(generation) else { return }
        let home = session.isHome
        if let cluster, !ended {
            let row = try? await cluster.database.lavalinkSession(session.id)
            resuming = row?.resuming ?? resuming
            timeout = row?.timeout ?? timeout
            if row == nil { resuming = false }
        }
        if !ended, let cluster, !home {
            let deadline = ContinuousClock.now + (resuming ? .seconds(timeout) : .seconds(86_400))
            repeat {
                try? await Task.sleep(for: min(LavalinkCluster.feedPatience, max(deadline - .now, .zero)))
                guard session.generation == nil else { return }
                // An answer the database cannot give keeps the part: its home decides.
                let wanted = (try? await cluster.database.lavalinkSessionWanted(session.id, homeWithin: cluster.relay.member.settings.pairTimeout)) ?? true
                if !wanted { break }
            } while ContinuousClock.now < deadline
        } else if !ended, resuming {
            try? await Task.sleep(for: .seconds(timeout))
            guard session.generation == nil else { return }
        }
        sessions.withLock { _ = $0.removeValue(forKey: session.id) }
        for player in session.removeAllPlayers() { await destroy(player, of: session.id) }
        if home, let cluster { try? await cluster.database.endLavalinkSession(session.id) }
    }

    /// A player of `guild` in `session`, its track changes written to its row in a cluster.
    func makePlayer(_ guild: SessionID, of session: LavalinkSession) -> LavalinkPlayer {
        LavalinkPlayer(guild: guild, session: session) { [weak session, cluster] player in
            if let session { cluster?.save(player, of: session) }
        }
    }

    // MARK: In a cluster

    /// This pair has taken `guild` on (a failover, a hand-over): it runs the guild's players again
    /// from their rows, their voice connections first (the session plays on by itself).
    func adopted(_ guild: SessionID) async {
        guard let cluster, let rows = try? await cluster.database.lavalinkPlayers(of: guild), !rows.isEmpty else { return }
        for (id, row, stored) in rows {
            let session = part(of: id, row: row)
            let (player, _) = session.player(guild) { makePlayer(guild, of: session) }
            let tracks = LavalinkCluster.tracks(stored)
            player.state.withLock { $0 = tracks }
            let old = player.token.withLock { $0 }
            if let old { store.unsubscribe(guild, token: old) }
            player.token.withLock { $0 = store.subscribe(guild, kind: .lavalink, sink: player) }
            if let credentials = try? Self.credentials(tracks.voice, user: session.userID, guild: guild) {
                voice.connect(guild, credentials: credentials)
            }
            cluster.save(player, of: session)
            logger.notice("runs a Lavalink player of a guild this pair took on", metadata: ["lavalink.session": "\(id)", "guild": "\(guild)"])
        }
    }

    /// `PATCH /v4/sessions/{id}`: the values after the update.
    func configure(_ id: String, resuming: Bool?, timeout: Int?) async throws(LavalinkError) -> (resuming: Bool, timeout: Int) {
        guard let cluster else { return try await session(id).configure(resuming: resuming, timeout: timeout) }
        let row: ClusterDatabase.LavalinkSessionRow?
        do {
            row = try await cluster.database.configureLavalinkSession(id, resuming: resuming, timeout: timeout)
        } catch {
            throw LavalinkError(status: .serviceUnavailable, message: "the cluster's database does not answer", code: "cluster_unavailable")
        }
        guard let row else { throw .notFound("Session not found") }
        // This Router's part keeps queueing for its home whatever the client asked.
        if let session = sessions.withLock({ $0[id] }), session.isHome { _ = session.configure(resuming: row.resuming, timeout: row.timeout) }
        return (row.resuming, row.timeout)
    }

    /// `GET /v4/sessions/{id}/players`: in a cluster, each as the pair that runs it answers.
    func players(of id: String) async throws(LavalinkError) -> [JSONObject] {
        let session = try await session(id)
        guard let cluster else {
            var views: [JSONObject] = []
            for player in session.players { views.append(await view(player)) }
            return views
        }
        guard let places = try? await cluster.database.lavalinkPlayerPlaces(of: id) else {
            throw LavalinkError(status: .serviceUnavailable, message: "the cluster's database does not answer", code: "cluster_unavailable")
        }
        var views: [JSONObject] = []
        for place in places {
            if place.pair == cluster.pairID, let guild = try? SessionID(place.guild), let player = session.player(guild) {
                views.append(await view(player))
            } else if let address = place.address, let found = await cluster.view(session: id, guild: place.guild, at: address) {
                views.append(found)
            }
        }
        return views
    }
}
