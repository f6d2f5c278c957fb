// What a reader of the engine → router stream gets: an audio packet or an event. An event comes
// with the line it was read from, so a reader that passes it on (the Router, to every client of
// the session) sends the engine's own bytes instead of encoding the event again.

/// One decoded message.
public enum WireMessage: Hashable, Sendable {
    case audio(AudioPacket)
    /// The event, and its JSON line as written (without the newline).
    case event(WireEvent, line: String)
}

extension WireMessage {
    /// An event message whose line is the event's own encoding (one made rather than read).
    public static func event(_ event: WireEvent) -> WireMessage { .event(event, line: event.jsonLine()) }

    public var sessionID: SessionID {
        switch self {
        case .audio(let packet): packet.sessionID
        case .event(let event, _): event.sessionID
        }
    }
}
