// What a reader of the engine → router stream gets: an audio packet or an event.

/// One decoded message.
public enum WireMessage: Hashable, Sendable {
    case audio(AudioPacket)
    case event(WireEvent)
}

extension WireMessage {
    public var sessionID: SessionID {
        switch self {
        case .audio(let packet): packet.sessionID
        case .event(let event): event.sessionID
        }
    }
}
