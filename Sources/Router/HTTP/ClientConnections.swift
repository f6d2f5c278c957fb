// The three ways to hear a session: a playground tab (`/ws`, a browser token), a per-guild bot
// connection (`/bot?guild=`, the bot token) and an Ogg Opus stream (`/listen/{id}.ogg`). WebSocket
// clients get the session's state first, then its Opus packets (binary) and state changes and
// events (text), and may send the same commands as the REST API.
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOWebSocket
import ServiceLifecycle
import ServiceSupport
import WireProtocol

struct ClientConnections {
    let store: SessionStore
    let directory: SessionDirectory
    let access: AccessControl
    let link: EngineLink
    let engine: EngineClient
    /// The sessions' `/listen` streams, one per session and kind while it has listeners.
    let feeds: ListenFeeds
    /// The sessions' messages of several frames, one feed per session and size while it has clients.
    let batches: FrameBatchFeeds
    /// In a cluster: carries a client of a session another pair owns to that pair.
    var relay: ClusterRelay?
    /// The sessions' HLS segmenters (`/hls`), made on first use.
    var hls: HLSOutput?
    /// The sessions' Discord voice connections (the `voice` command of bots).
    var voice: VoiceConnections?
    /// How long a client told to go (too slow) has to take the close frame before the
    /// connection is cut.
    var closeGrace: TimeAmount = .seconds(2)
    /// How long a client has to take the close frame when the Router stops, before its
    /// connection is cut: a client that reads nothing must not hold the shutdown.
    static let shutdownGrace: TimeAmount = .seconds(1)

    func addRoutes(to router: Router<TonearmRequestContext>) {
        router.ws("/ws") { request, _ in
            try Self.shouldUpgrade(request, access.webSocketSession)
        } onUpgrade: { inbound, outbound, context in
            guard let id = try await Self.admit(context.request, access.webSocketSession, outbound),
                let frames = try await Self.admit(context.request, Self.framesPerMessage, outbound)
            else { return }
            guard try await servedHere(id, inbound: inbound, outbound: outbound, context: context) else { return }
            // Another pair's Router relaying this session, a station, to its followers there.
            if let refusal = StationRelays.join(context.request, id, store: store) {
                try await outbound.close(.init(codeNumber: 4000 + refusal.status.code), reason: Self.closeReason(refusal))
                return
            }
            let stationRelay = StationRelays.isRelay(context.request)
            defer { if stationRelay { store.leaveRemoteFollowers(id) } }
            try await serve(id, kind: .browser, frames: frames, inbound: inbound, context: context)
        }
        router.ws("/bot") { request, _ in
            try Self.shouldUpgrade(request, access.bot)
        } onUpgrade: { inbound, outbound, context in
            guard let id = try await Self.admit(context.request, access.bot, outbound),
                let frames = try await Self.admit(context.request, Self.framesPerMessage, outbound)
            else { return }
            guard try await servedHere(id, inbound: inbound, outbound: outbound, context: context) else { return }
            try await serve(id, kind: .bot, frames: frames, inbound: inbound, context: context)
        }
        router.get("/hls/:id/:file") { request, context -> Response in
            let id = try RouterApplication.sessionID(path: context.parameters.get("id"))
            try access.authorizeListening(request, for: id)
            return try await hlsFile(context.parameters.get("file") ?? "", of: id, request: request)
        }
        router.get("/listen/:file") { request, context -> Response in
            let file = context.parameters.get("file") ?? ""
            guard file.hasSuffix(".ogg") else {
                throw APIError(status: .notFound, code: "not_found", message: "listen at /listen/{session id}.ogg")
            }
            let id = try RouterApplication.sessionID(path: String(file.dropLast(4)))
            try access.authorizeListening(request, for: id)
            // `chain=0`: one logical stream for good, for players that stop at a chain.
            let chains = request.uri.queryParameters["chain"] != "0"
            return try await listen(to: id, chains: chains, channel: context.channel, logger: context.logger)
        }
    }

    /// A WebSocket request is upgraded, its token checked once it is (`admit`). A plain request
    /// gets the JSON refusal a token check gives (401, 403) or a bad `frames` gives (400), else
    /// 426: accepted, it would set up an upgrade that never happens, held until its connection
    /// closes (`WebSocketUpgradeSlot`), so one keep-alive connection repeating it could grow the
    /// Router without bound.
    static func shouldUpgrade(
        _ request: Request, _ check: (Request) throws(APIError) -> SessionID
    ) throws(APIError) -> RouterShouldUpgrade {
        if request.headers[.upgrade]?.lowercased().contains("websocket") == true { return .upgrade([:]) }
        _ = try check(request)
        _ = try framesPerMessage(request)
        throw APIError(
            status: .upgradeRequired, code: "websocket_required",
            message: "\(request.uri.path) is a WebSocket: connect with Upgrade: websocket")
    }

    /// The session an upgraded connection's token names, or nil after closing the connection with
    /// code 4000 + the refusal's HTTP status (4401 no or a wrong token, 4403 another session's)
    /// and its message as the reason. Hummingbird can refuse an upgrade only with a bare 400, which
    /// would tell a client nothing (and look to it like a fault worth retrying).
    static func admit<Value>(
        _ request: Request, _ check: (Request) throws(APIError) -> Value, _ outbound: WebSocketOutboundWriter
    ) async throws -> Value? {
        do {
            return try check(request)
        } catch {
            try await outbound.close(.init(codeNumber: 4000 + error.status.code), reason: closeReason(error))
            return nil
        }
    }

    /// The audio frames per message a WebSocket client asks for (`frames`, 1 to 10; 1 when not
    /// given): with more than one, each binary message holds several (docs/bot-protocol.md).
    static func framesPerMessage(_ request: Request) throws(APIError) -> Int {
        guard let text = request.uri.queryParameters["frames"] else { return 1 }
        guard let frames = Int(text), (1...FrameBatchFeed.maxFrames).contains(frames) else {
            throw APIError(
                status: .badRequest, code: "invalid_frames",
                message: "frames is how many audio frames each message holds: a whole number from 1 to \(FrameBatchFeed.maxFrames)")
        }
        return frames
    }

    /// In a cluster, whether this pair plays `id`; if another does, the client is relayed there
    /// (until it leaves) and the answer is false. A session between pairs is waited for; one
    /// that cannot be placed closes the connection with 4503 and why.
    private func servedHere(
        _ id: SessionID, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter,
        context: WebSocketRouterContext<TonearmRequestContext>
    ) async throws -> Bool {
        guard let relay else { return true }
        let placement: Placement
        do {
            placement = try await relay.placeWaiting(id)
        } catch {
            try await outbound.close(.init(codeNumber: 4000 + error.status.code), reason: Self.closeReason(error))
            return false
        }
        guard case .remote(let address) = placement else { return true }
        if context.request.headers[ClusterRelay.forwardedHeader] != nil {
            // Relayed here by a pair that thought this one owned it: that pair looks again.
            try await outbound.close(.init(codeNumber: 4012), reason: "session_moved: connect again")
            return false
        }
        try await relay.relay(id, first: address, request: context.request, inbound: inbound, outbound: outbound)
        return false
    }

    /// `error`'s code and message, cut to the 123 bytes a close frame's reason may hold.
    static func closeReason(_ error: APIError) -> String {
        var reason = "\(error.code): \(error.message)"
        while reason.utf8.count > 123 { reason.removeLast() }
        return reason
    }

    /// Streams the session to a WebSocket client and runs its commands until either side ends.
    private func serve(
        _ id: SessionID, kind: ClientKind, frames: Int, inbound: WebSocketInboundStream,
        context: WebSocketRouterContext<TonearmRequestContext>
    ) async throws {
        // A browser token's commands count against the browsers' share of the engine's pool.
        let limited = kind == .browser && !access.isBot(context.request)
        let channel = context.requestContext.channel
        let logger = context.logger
        await Self.limitBuffering(channel)
        let sink = WebSocketSink(
            eventLoop: channel.eventLoop, queueFrames: store.clientBufferFrames, window: store.newWindow(),
            closeGrace: closeGrace, framesPerMessage: frames
        ) { [store] dropped, reason in
            store.noteSlowClient(droppedFrames: dropped, disconnected: reason != nil)
            if let reason {
                logger.warning("disconnecting a client that stays behind", metadata: ["session.id": "\(id)", "reason": "\(reason)"])
            }
        }
        try await WebSocketSink.install(sink, in: channel)
        let stationRelay = StationRelays.isRelay(context.request)
        // The state goes out first: it is queued on the client's loop before the subscription
        // can queue anything there, inside the controller so no change falls in between, and
        // with the session pinned so it cannot be released before the subscription holds it.
        // A client of several frames per message is written by the session's feed of that many.
        let (controller, token, feed) = try await directory.using(id) { [store, batches] controller in
            let (token, feed) = await controller.withCurrentState { state -> (UInt64, FrameBatchFeed?) in
                send(.event(state.json()), to: sink)
                // A station relay is told first what its followers there hear now.
                if stationRelay, let ready = store.hearing(of: id) { send(.event(ready.jsonLine()), to: sink) }
                guard frames > 1 else { return (store.subscribe(id, kind: kind, sink: sink), nil) }
                return (store.subscribe(id, kind: kind, client: sink), batches.attach(sink, to: id, variant: frames))
            }
            return (controller, token, feed)
        }
        let leave: @Sendable () -> Void = { [batches] in if let feed { batches.detach(sink, from: feed, of: id) } }
        defer {
            store.unsubscribe(id, token: token)
            leave()
        }
        let relayed = context.request.headers[ClusterRelay.forwardedHeader] != nil
        let callerToken = AccessControl.token(in: context.request)
        try await withGracefulShutdownHandler {
            for try await message in inbound.messages(maxSize: 64 * 1024) {
                guard case .text(let text) = message else { continue }
                if relayed, text == ClusterRelay.leaveMessage {
                    // The relaying Router stops: what was sent to it goes on to its client, the
                    // frames after are kept for the client's next connection here.
                    store.unsubscribeKeepingCatchUp(id, token: token, keep: .seconds(1))
                    leave()
                    sink.eventLoop.execute { sink.movedAfterWaiting() }
                    continue
                }
                if relayed, let (tag, body) = RelayTag.split(text) {
                    // One of the relaying Router's clients, with its own token (SharedUpstream).
                    let answer = await relayedCommand(body, tag: tag, on: controller, id: id, kind: kind)
                    send(.event(tag.answering.tagging(answer)), to: sink)
                    continue
                }
                let reply = await command(text, on: controller, id: id, limited: limited, bot: kind == .bot, callerToken: callerToken)
                send(.event(reply), to: sink)
            }
        } onGracefulShutdown: {
            sink.eventLoop.execute { sink.goAway(grace: Self.shutdownGrace) }
        }
    }

    /// A reply or the first state, written in order with what the store writes to the client.
    func send(_ message: ClientMessage, to sink: WebSocketSink) {
        let bytes = sink.encode(message)
        sink.eventLoop.execute { sink.deliver(bytes, audio: false) }
    }

    /// Keeps what the kernel and NIO hold for one client to a moment of audio: Linux would
    /// otherwise let a client that stopped reading queue up to 4 MB (minutes of Opus), and what
    /// is handed to the socket can no longer be dropped. NIO holds 4 KiB in flight (a dozen
    /// frames of 128 kbit/s audio); beyond that, frames wait in the client's `WebSocketSink` (or a
    /// listener's subscription), which drops the oldest.
    static func limitBuffering(_ channel: any Channel) async {
        let high = 4 * 1024
        try? await channel.setOption(ChannelOptions.socketOption(.so_sndbuf), value: 32 * 1024).get()
        try? await channel.setOption(
            ChannelOptions.writeBufferWaterMark, value: ChannelOptions.Types.WriteBufferWaterMark(low: high / 2, high: high)
        ).get()
    }

    /// Runs one WebSocket command and answers its reply message.
    func command(
        _ text: String, on controller: SessionController, id: SessionID, limited: Bool, bot: Bool, callerToken: String?
    ) async -> String {
        var reply = CommandReply(id: nil)
        do throws(APIError) {
            let data = Data(text.utf8)
            let envelope = try CommandParsing.envelope(data)
            reply.id = envelope.id
            let layers = LayerCommands(directory: directory, link: link, engine: engine)
            if envelope.op == "state" {
                reply.state = await controller.state
            } else if envelope.op == "layer" {
                reply.layer = try await layers.add(try LayerCommands.request(data), on: id)
                reply.state = await controller.state
            } else if envelope.op == "voice" || envelope.op == "voice_leave" {
                try voiceCommand(envelope.op, data, on: id, bot: bot)
                reply.state = await controller.state
            } else if envelope.op == "layer_stop" {
                reply.stopped = try await layers.remove(try LayerCommands.stop(data), on: id)
                reply.state = await controller.state
            } else {
                let arguments = try CommandParsing.arguments(data)
                let command = try CommandParsing.command(envelope.op, arguments: arguments)
                try access.authorizeFollowing(command, token: arguments.token, callerToken: callerToken)
                reply.state = try await SessionCommands(directory: directory, link: link, engine: engine)
                    .run(command, on: id, browser: limited)
            }
            reply.ok = true
        } catch {
            reply.error = ErrorBody(code: error.code, message: error.message).error
        }
        return reply.json()
    }

    /// `voice` (the guild's voice credentials: Tonearm connects and sends the session there) and
    /// `voice_leave`; bots only. What follows comes as `voice_state` events.
    private func voiceCommand(_ op: String, _ data: Data, on id: SessionID, bot: Bool) throws(APIError) {
        guard bot, let voice else {
            throw APIError(status: .forbidden, code: "voice_needs_bot", message: "only a bot connection (/bot) may hand voice credentials")
        }
        if op == "voice" {
            voice.connect(id, credentials: try VoiceCommand.credentials(data, guild: id))
        } else if !voice.leave(id) {
            throw APIError(status: .notFound, code: "voice_not_connected", message: "this guild has no voice connection to leave")
        }
    }

    /// A file of `id`'s HLS stream (`HLSFile`), when `HLSFastPath` did not answer it: a player's
    /// first playlist, a session another pair plays, a refusal.
    private func hlsFile(_ file: String, of id: SessionID, request: Request) async throws -> Response {
        guard let hls else { throw APIError(status: .notFound, code: "not_found", message: "HLS is not enabled") }
        let answer: HLSFile
        switch file {
        case "index.m3u8":
            let query = HLSFile.query(token: request.uri.queryParameters["token"])
            // A player's first request waits for the first segments of a session that plays;
            // one that plays nothing is answered at once. Later ones are answered from memory.
            // The session is pinned while its segmenter starts, as a listener's is.
            let text: String
            if let ready = hls.ready(id, query: query) {
                text = ready
            } else {
                text = try await directory.using(id) { controller in
                    let playing = await controller.state.status == "playing"
                    return await hls.playlist(id, query: query, wait: playing ? .seconds(8) : .zero)
                }
            }
            answer = .playlist(text)
        case "init.mp4":
            answer = .initialization
        default:
            guard let sequence = HLSFile.sequence(file[...]), let segment = hls.segment(id, sequence: sequence) else {
                throw APIError(status: .notFound, code: "segment_not_found", message: "\(file) is not a segment this session keeps")
            }
            answer = .segment(segment)
        }
        return Response(status: .ok, headers: answer.headers, body: ResponseBody(byteBuffer: answer.body))
    }

    /// The event of a line if it begins a track (`ready`); other events are not parsed.
    static func trackStart(_ line: String) -> WireEvent? {
        guard line.contains(#""type":"ready""#), let event = try? WireEvent(jsonLine: Array(line.utf8)), event.type == .ready
        else { return nil }
        return event
    }

    /// The session as an endless Ogg Opus stream, for as long as the listener stays (and keeps up):
    /// written by a `ListenSink` on the listener's event loop from the session's `ListenFeed`;
    /// the response's body only waits for the listener to go or the Router to stop.
    private func listen(to id: SessionID, chains: Bool, channel: any Channel, logger: Logger) async throws -> Response {
        await Self.limitBuffering(channel)
        // Finished when the stream is over: the listener gone, the sink done with it, the Router stopping.
        let (over, done) = AsyncStream<Never>.makeStream()
        let sink = ListenSink(
            eventLoop: channel.eventLoop, queueFrames: store.clientBufferFrames, window: store.newWindow(),
            closeGrace: closeGrace, ended: { done.finish() }
        ) { [store] dropped, reason in
            store.noteSlowClient(droppedFrames: dropped, disconnected: reason != nil)
            if let reason {
                logger.warning("disconnecting a listener that stays behind", metadata: ["session.id": "\(id)", "reason": "\(reason)"])
            }
        }
        // Before the head goes out, so the sink sees it pass; the session is pinned while it is
        // subscribed, as a WebSocket client's is.
        try await ListenSink.install(sink, in: channel)
        let token: UInt64, feed: ListenFeed
        do {
            (token, feed) = try await directory.using(id) { [store, feeds] _ in
                (store.subscribe(id, kind: .listener, client: sink), feeds.attach(sink, to: id, variant: chains))
            }
        } catch {
            channel.eventLoop.execute { sink.retire() }
            throw error
        }
        let leave: @Sendable () -> Void = { [store, feeds] in
            store.unsubscribe(id, token: token)
            feeds.detach(sink, from: feed, of: id)
        }
        // Whether or not the response gets to its body.
        channel.closeFuture.whenComplete { _ in
            leave()
            done.finish()
        }
        var headers = HTTPFields()
        headers[.contentType] = "audio/ogg"
        headers[.cacheControl] = "no-store"
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                defer { leave() }
                // The stream never ends by itself: it ends with the listener's connection, when the
                // sink is done with it, and when the Router stops (a graceful shutdown waits for
                // every response, and would wait for ever).
                await withGracefulShutdownHandler {
                    for await _ in over {}
                } onGracefulShutdown: {
                    leave()
                    // A listener that reads nothing would keep the last write, and the shutdown, waiting.
                    channel.eventLoop.execute { sink.leave(grace: Self.shutdownGrace) }
                }
                try await writer.finish(nil)
            })
    }
}
