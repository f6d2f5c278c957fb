// What the session store hands a session's clients, and who they are: the messages (Opus or text),
// the kinds of client, and the sink a WebSocket client is written through.
import NIOCore

/// What a client receives: an Opus packet (binary message) or JSON (text message).
package enum ClientMessage: Sendable {
    case audio(ByteBuffer)
    case event(String)
}

/// Who is listening.
package enum ClientKind: String, Sendable, CaseIterable, Codable {
    /// A playground tab (`/ws`).
    case browser
    /// A per-guild bot connection (`/bot`).
    case bot
    /// An Ogg Opus listener (`/listen`).
    case listener
    /// A session's HLS segmenter (`/hls`): one per session, whatever the number of HLS listeners.
    case hls
    /// A guild's Discord voice connection that Tonearm makes itself (the `voice` command).
    case voice
    /// A player of a Lavalink client (`/v4`): the session's events only, as Lavalink's.
    case lavalink
}

/// A client on an event loop that the store tells when its session moves.
package protocol MovableClient: AnyObject, Sendable {
    var eventLoop: any EventLoop { get }
    /// Tells the client its session moved to another pair of the cluster: it is to connect again
    /// (through any pair, which brings it to the new owner). Called on `eventLoop`.
    func moved()
}

/// A client written directly on its channel's event loop (a WebSocket connection, a session's
/// `/listen` feed).
package protocol ClientSink: MovableClient {
    /// The bytes `message` goes out as; computed once per message for all sinks of a loop.
    func encode(_ message: ClientMessage) -> ByteBuffer
    /// Called on `eventLoop`, in publish order. An audio frame may be dropped (the sink keeps
    /// its own slow-client window); events are not.
    func deliver(_ bytes: ByteBuffer, audio: Bool)
}

extension MovableClient {
    package func moved() {}
}
