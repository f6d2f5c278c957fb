// The Lavalink v4 node this Router is to Lavalink clients (docs/lavalink.md): its sessions and
// their players, each player a Tonearm session of the guild's id, driven through the same
// commands as `/bot` (`SessionCommands`) and heard through Tonearm's own voice connection
// (`VoiceConnections`). What a `PATCH` of a player asks is read into `PlayerUpdate` (a value)
// first, then carried out here in Lavalink's order: voice, track, position, volume, paused,
// filters.
import DiscordVoice
import EngineAPI
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceSupport
import Synchronization
import WireProtocol

final class LavalinkNode: Sendable {
    let password: String
    let playerUpdateInterval: Duration
    let statsInterval: Duration
    let store: SessionStore
    let directory: SessionDirectory
    let commands: SessionCommands
    let engine: EngineClient
    let voice: VoiceConnections
    let startedAt = ContinuousClock.now
    let logger: Logger
    /// In a cluster: the sessions and players every pair shares (nil: a single pair).
    let cluster: LavalinkCluster?
    let sessions = Mutex<[String: LavalinkSession]>([:])
    /// The clients' connections (`LavalinkSocket`), cut when the Router stops.
    let sockets = NIOLockedValueBox<(open: [UInt64: any Channel], last: UInt64)>(([:], 0))

    init(
        password: String, playerUpdateInterval: Duration, statsInterval: Duration = .seconds(60), store: SessionStore,
        directory: SessionDirectory, commands: SessionCommands, engine: EngineClient, voice: VoiceConnections, logger: Logger,
        cluster: LavalinkCluster? = nil
    ) {
        self.password = password
        self.playerUpdateInterval = playerUpdateInterval
        self.statsInterval = statsInterval
        self.store = store
        self.directory = directory
        self.commands = commands
        self.engine = engine
        self.voice = voice
        self.logger = logger
        self.cluster = cluster
    }

    // MARK: Sessions (LavalinkNode+Sessions)

    // MARK: Players

    /// A player's JSON, as `GET …/players/{guildId}` answers it.
    func view(_ player: LavalinkPlayer) async -> JSONObject {
        let state = await directory.existing(player.guild)?.state
        let tracks = player.state.withLock { $0 }
        var track: any Sendable = NSNull()
        if var current = tracks.current ?? tracks.pending, var info = current["info"] as? JSONObject {
            info["position"] = state?.positionMS ?? 0
            current["info"] = info
            track = current
        }
        var filters = state.flatMap { try? JSONSerialization.jsonObject(with: JSONEncoder().encode($0.filters)) } as? JSONObject ?? [:]
        // With a volume filter the session plays at the product: the player's volume is its own.
        let volume = tracks.filterVolume == 1 ? state?.volume ?? 100 : tracks.volume ?? 100
        if tracks.filterVolume != 1 { filters["volume"] = tracks.filterVolume }
        filters["pluginFilters"] = [TonearmSettings.pluginName: TonearmSettings.json(state, directory: directory)] as JSONObject
        return [
            "guildId": player.guild.description, "track": track, "volume": volume, "paused": state?.paused ?? false,
            "state": Self.playerState(tracks, position: state?.positionMS ?? 0, ping: voice.ping(player.guild)),
            "voice": tracks.voice, "filters": filters,
        ]
    }

    /// `ping`: the voice gateway's heartbeat round trip (0 while connected before the first
    /// heartbeat is answered; -1 when not connected, as Lavalink says it).
    static func playerState(_ tracks: LavalinkPlayer.Tracks, position: Int64, ping: Int?) -> JSONObject {
        [
            "time": Int64(Date().timeIntervalSince1970 * 1_000), "position": position, "connected": tracks.connected,
            "ping": tracks.connected ? ping ?? 0 : -1,
        ]
    }

    /// `PATCH /v4/sessions/{sessionId}/players/{guildId}`.
    func update(_ guild: SessionID, of session: LavalinkSession, _ update: PlayerUpdate, noReplace: Bool) async throws(LavalinkError)
        -> JSONObject
    {
        let (player, made) = session.player(guild) { makePlayer(guild, of: session) }
        if made { player.token.withLock { $0 = store.subscribe(guild, kind: .lavalink, sink: player) } }
        defer { cluster?.save(player, of: session) }
        if let voiceObject = update.voice {
            let credentials = try Self.credentials(voiceObject, user: session.userID, guild: guild)
            player.state.withLock { $0.voice = voiceObject }
            voice.connect(guild, credentials: credentials)
        }
        switch update.track {
        case .keep: break
        case .stop:
            if player.state.withLock({ $0.current ?? $0.pending }) != nil { try await run(.stop, on: guild) }
        case .play(let track, let url):
            try await play(track, url: url, on: player, noReplace: noReplace)
        case .identifier(let identifier, let userData):
            guard var track = LavalinkLoader.firstTrack(await LavalinkLoader(engine: engine).load(identifier)),
                let info = track["info"] as? JSONObject
            else { throw .badRequest("identifier \(identifier) loads no track") }
            track["userData"] = userData
            try await play(track, url: info["uri"] as? String ?? identifier, on: player, noReplace: noReplace)
        }
        if let position = update.position {
            switch update.track {
            case .keep: try await run(.seek(positionMS: position), on: guild)
            case .stop: break  // nothing plays to be at a position
            case .play, .identifier: try await seekOnceStarted(position, on: guild)
            }
        }
        if update.volume != nil || update.filterVolume != nil {
            let stored = player.state.withLock { ($0.volume, $0.filterVolume) }
            var own = update.volume ?? stored.0
            if own == nil { own = await directory.existing(guild)?.state.volume }
            let factor = update.filterVolume ?? stored.1
            player.state.withLock { $0.volume = own ?? 100; $0.filterVolume = factor }
            if update.volume != nil || factor != stored.1 {
                try await run(.volume(PlayerUpdate.engineVolume(own ?? 100, filter: factor)), on: guild)
            }
        }
        // Lavalink's `paused` is a state, not a toggle: the same state again is no change.
        if let paused = update.paused, await directory.existing(guild)?.state.paused != paused {
            try await run(paused ? .pause : .resume, on: guild)
        }
        if let filters = update.filters { try await run(.filters(filters), on: guild) }
        for command in update.settings?.commands ?? [] { try await run(command, on: guild) }
        if let endTime = update.endTime { try await end(player, at: endTime, newTrack: update.track) }
        return await view(player)
    }

    private func play(_ track: JSONObject, url: String, on player: LavalinkPlayer, noReplace: Bool) async throws(LavalinkError) {
        if noReplace, player.state.withLock({ $0.current ?? $0.pending }) != nil { return }
        player.state.withLock { $0.pending = track }
        let view = try await run(.play(url: url), on: player.guild)
        // A player holds one track: what Tonearm's queue keeps before it goes.
        for _ in 0..<(view.current ?? 0) { _ = try? await run(.remove(index: 0), on: player.guild) }
    }

    /// A position given with a track is where it starts (Lavalink's meaning): the seek waits for
    /// the engine to have opened the track (at most `startPatience`).
    private func seekOnceStarted(_ position: Int64, on guild: SessionID) async throws(LavalinkError) {
        let deadline = ContinuousClock.now + Self.startPatience
        while true {
            do {
                try await run(.seek(positionMS: position), on: guild)
                return
            } catch {
                let starting = await directory.existing(guild)?.state.status == "starting"
                guard error.code == "invalid_state", starting, ContinuousClock.now < deadline else { throw error }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    static let startPatience: Duration = .seconds(10)

    /// `endTime`: the engine ends the player's play there, `finished` (Lavalink's TrackEndEvent
    /// `finished`). A track given with it gets it once the engine has opened it (its `ready`, at
    /// most `startPatience`), without holding up the answer; `null` with a new track is nothing
    /// to do (a new play has no end set).
    private func end(_ player: LavalinkPlayer, at endTime: Int64?, newTrack: PlayerUpdate.TrackChange) async throws(LavalinkError) {
        switch newTrack {
        case .stop: return
        case .play, .identifier:
            guard let endTime else { return }
            Task { await self.endOnceStarted(player, at: endTime) }
        case .keep:
            let (playID, pending) = player.state.withLock { ($0.currentPlayID, $0.pending != nil) }
            if pending, let endTime {
                Task { await self.endOnceStarted(player, at: endTime) }
            } else if let playID {
                do {
                    try await engine.control(player.guild, .endAt(positionMS: endTime, playID: UInt64(exactly: playID)))
                } catch {
                    throw LavalinkError(status: error.status, message: error.message, code: error.code)
                }
            }
        }
    }

    private func endOnceStarted(_ player: LavalinkPlayer, at endTime: Int64) async {
        let deadline = ContinuousClock.now + Self.startPatience
        while ContinuousClock.now < deadline {
            if let playID = player.state.withLock({ $0.pending == nil ? $0.currentPlayID : nil }) {
                do {
                    try await engine.control(player.guild, .endAt(positionMS: endTime, playID: UInt64(exactly: playID)))
                } catch {
                    logger.info("endTime not set", metadata: ["guild": "\(player.guild)", "why": "\(error.message)"])
                }
                return
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// `DELETE …/players/{guildId}`, or the end of its session: the guild stops, its voice
    /// connection ends, the player is gone.
    func destroy(_ player: LavalinkPlayer, of session: String) async {
        if let token = player.token.withLock({ $0 }) { store.unsubscribe(player.guild, token: token) }
        cluster?.delete(player.guild, of: session)
        // A client that connected again without resuming moved its player to its new session: the
        // guild plays on for that one when the old session ends.
        func heldElsewhere() -> Bool { allSessions.contains { $0.player(player.guild) != nil } }
        guard !heldElsewhere() else { return }
        _ = voice.leave(player.guild)
        guard player.state.withLock({ $0.current ?? $0.pending }) != nil, !heldElsewhere() else { return }
        _ = try? await run(.stop, on: player.guild)
    }

    @discardableResult
    func run(_ command: SessionCommand, on guild: SessionID) async throws(LavalinkError) -> SessionView {
        do {
            return try await commands.run(command, on: guild, browser: false)
        } catch {
            throw LavalinkError(status: error.status, message: error.message, code: error.code)
        }
    }

    /// The voice object with the bot's user id, checked as the `voice` command checks its own.
    static func credentials(_ voice: JSONObject, user: String, guild: SessionID) throws(LavalinkError) -> VoiceCredentials {
        let fields: JSONObject = [
            "user_id": user, "session_id": voice["sessionId"] ?? NSNull(), "channel_id": voice["channelId"] ?? "0",
            "token": voice["token"] ?? NSNull(), "endpoint": voice["endpoint"] ?? NSNull(),
        ]
        do {
            return try VoiceCommand.credentials(LavalinkJSON.data(fields), guild: guild)
        } catch {
            throw .badRequest("voice: \(error.message)")
        }
    }

    // MARK: Periodic messages

    /// Sends every connected client its players' `playerUpdate` each interval and the node's
    /// `stats` each minute, until cancelled.
    func run() async {
        var sinceStats = Duration.zero
        var usage = ProcessUsage()
        var frames = try? await engine.frameCounters()
        while !Task.isCancelled {
            try? await Task.sleep(for: playerUpdateInterval)
            for session in allSessions where session.generation != nil {
                for player in session.players {
                    let position = await directory.existing(player.guild)?.state.positionMS ?? 0
                    let tracks = player.state.withLock { $0 }
                    session.send(
                        LavalinkJSON.text([
                            "op": "playerUpdate", "guildId": player.guild.description,
                            "state": Self.playerState(tracks, position: position, ping: voice.ping(player.guild)),
                        ]))
                }
            }
            sinceStats += playerUpdateInterval
            if sinceStats >= statsInterval {
                sinceStats = .zero
                var message = await stats(usage: &usage)
                message["op"] = "stats"
                let reading = try? await engine.frameCounters()
                if let before = frames, let after = reading,
                    let counted = FrameStats.perMinute(before: before, after: after, players: await playingGuilds())
                {
                    message["frameStats"] = counted.json
                }
                frames = reading
                let text = LavalinkJSON.text(message)
                for session in allSessions where session.generation != nil { session.send(text) }
            }
        }
    }

    /// The stats object (`/v4/stats`, and the `stats` op with `op` added).
    func stats(usage: inout ProcessUsage) async -> JSONObject {
        let players = allSessions.flatMap(\.players)
        let playing = await playingGuilds().count
        let memory = ProcessUsage.memory()
        return [
            "players": players.count, "playingPlayers": playing,
            "uptime": Int64((ContinuousClock.now - startedAt).components.seconds * 1_000),
            "memory": ["free": memory.free, "used": memory.used, "allocated": memory.used, "reservable": memory.total] as JSONObject,
            "cpu": [
                "cores": ProcessInfo.processInfo.activeProcessorCount, "systemLoad": LoadScore.hostLoad(),
                "lavalinkLoad": usage.cpuShare(),
            ] as JSONObject,
            "frameStats": NSNull(),
        ]
    }

    /// The guilds whose players play now.
    func playingGuilds() async -> [SessionID] {
        var playing: [SessionID] = []
        for player in allSessions.flatMap(\.players) where await directory.existing(player.guild)?.state.status == "playing" {
            playing.append(player.guild)
        }
        return playing
    }
}
