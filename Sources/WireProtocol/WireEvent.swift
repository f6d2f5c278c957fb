// A one-line JSON event on the engine → router stream. Always carries `type` and `session_id`;
// the other fields are present when the event type has them.
public import NIOCore
public import Foundation

/// The kind of an event. Open-ended so that an older reader passes newer types through.
public struct EventType: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// A play resolved its source; its first packet follows.
    public static let ready = EventType("ready")
    /// A play ended; nothing of that play follows. See `FinishReason`.
    public static let finished = EventType("finished")
    /// A play or a request failed; `code` and `message` say how.
    public static let error = EventType("error")
    public static let paused = EventType("paused")
    public static let resumed = EventType("resumed")
    public static let seeked = EventType("seeked")
    public static let progress = EventType("progress")
    public static let volume = EventType("volume")

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(String.self)
    }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// Why a play ended.
public enum FinishReason: String, Codable, Sendable {
    /// The source ran out.
    case finished
    /// A stop request.
    case stopped
    /// A new play on the same session.
    case replaced
    /// The source failed.
    case error
    /// The session was idle too long and was removed.
    case cleanup
}

/// One event. Encoded by `JSONEncoder`, so any string content round-trips.
public struct WireEvent: Hashable, Sendable, Codable {
    public var type: EventType
    public var sessionID: SessionID
    public var playID: UInt64?
    public var reason: FinishReason?
    public var code: String?
    public var message: String?
    public var url: String?
    public var title: String?
    public var durationMS: Int64?
    public var positionMS: Int64?
    public var volume: Int?
    public var passthrough: Bool?

    public init(
        type: EventType, sessionID: SessionID, playID: UInt64? = nil, reason: FinishReason? = nil,
        code: String? = nil, message: String? = nil, url: String? = nil, title: String? = nil,
        durationMS: Int64? = nil, positionMS: Int64? = nil, volume: Int? = nil, passthrough: Bool? = nil
    ) {
        self.type = type
        self.sessionID = sessionID
        self.playID = playID
        self.reason = reason
        self.code = code
        self.message = message
        self.url = url
        self.title = title
        self.durationMS = durationMS
        self.positionMS = positionMS
        self.volume = volume
        self.passthrough = passthrough
    }

    enum CodingKeys: String, CodingKey {
        case type
        case sessionID = "session_id"
        case playID = "play_id"
        case reason, code, message, url, title
        case durationMS = "duration_ms"
        case positionMS = "position_ms"
        case volume, passthrough
    }

    /// The event as one JSON object, without the trailing newline.
    public func jsonLine() -> String {
        // Encoding a struct of strings, numbers and booleans cannot fail.
        let data = (try? WireEvent.encoder.encode(self)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// Parses one line (without its newline).
    public init(jsonLine bytes: some Collection<UInt8>) throws(WireProtocolError) {
        do {
            self = try WireEvent.decoder.decode(WireEvent.self, from: Data(bytes))
        } catch let error as DecodingError {
            throw .malformedEvent(Self.explain(error))
        } catch {
            throw .malformedEvent("\(error)")
        }
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        return encoder
    }()
    private static let decoder = JSONDecoder()

    private static func explain(_ error: DecodingError) -> String {
        switch error {
        case .keyNotFound(let key, _): "missing field \"\(key.stringValue)\""
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
            context.codingPath.isEmpty
                ? "not a JSON object: \(context.debugDescription)"
                : "field \"\(context.codingPath.map(\.stringValue).joined(separator: "."))\": \(context.debugDescription)"
        @unknown default: "\(error)"
        }
    }
}

extension ByteBuffer {
    /// Appends `event` as one JSON line ending in `\n`.
    @discardableResult
    public mutating func writeEvent(_ event: WireEvent) -> Int {
        writeString(event.jsonLine()) + writeInteger(UInt8(ascii: "\n"))
    }
}
