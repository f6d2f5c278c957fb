// What the session store hands a session's clients, and who they are: the messages (Opus or text)
// and the kinds of client (ClientSink.swift: how a client is written to).
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
