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
    /// The engine's load report (`load`), every 10 s and when it changes; its `session_id` is
    /// `SessionID.engine`.
    public static let load = EventType("load")
    /// A layer's first samples are in the next packet (`layer_id`).
    public static let layerStarted = EventType("layer_started")
    /// A layer ended (`layer_id`, `reason`): nothing of it is in the packets that follow.
    public static let layerEnded = EventType("layer_ended")
    /// A streaming play has had no frame for the engine's stuck threshold (`duration_ms`: its
    /// source stalls); once per stall, at the position it stopped at (`position_ms`). It plays on
    /// when its source does.
    public static let stuck = EventType("stuck")

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

/// One event. Encoded by `JSONEncoder`, so any string content round-trips. Its strings are cut
/// to `Limit`s (at a character boundary, ending in "…"), so a line is at most `maxLineBytes`
/// long whatever a source's tags hold and can never exceed what a reader accepts.
public struct WireEvent: Hashable, Sendable, Codable {
    /// The most UTF-8 bytes each string field keeps.
    public enum Limit {
        public static let code = 64
        public static let message = 1_024
        public static let url = 4_096
        public static let title = 1_024
        public static let artist = 1_024
    }

    /// An upper bound on a line's length: every string at its limit and every byte escaped as
    /// `\u00XX` (6 bytes), plus the keys, numbers and punctuation. Inside `WireFormat.maxFrameLength`.
    public static let maxLineBytes = 6 * (Limit.code + Limit.message + Limit.url + Limit.title + Limit.artist) + 1_024

    public var type: EventType
    public var sessionID: SessionID
    public var playID: UInt64?
    public var reason: FinishReason?
    public var code: String? { didSet { code = Self.bounded(code, Limit.code) } }
    public var message: String? { didSet { message = Self.bounded(message, Limit.message) } }
    public var url: String? { didSet { url = Self.bounded(url, Limit.url) } }
    public var title: String? { didSet { title = Self.bounded(title, Limit.title) } }
    /// `ready` only: the track's artist, when its tags (or the page it came from) say.
    public var artist: String? { didSet { artist = Self.bounded(artist, Limit.artist) } }
    public var durationMS: Int64?
    public var positionMS: Int64?
    public var volume: Int?
    public var passthrough: Bool?
    /// `load` events only.
    public var load: LoadReport?
    /// `layer_started` and `layer_ended` only: which layer of the play.
    public var layerID: UInt64?

    public init(
        type: EventType, sessionID: SessionID, playID: UInt64? = nil, reason: FinishReason? = nil,
        code: String? = nil, message: String? = nil, url: String? = nil, title: String? = nil,
        durationMS: Int64? = nil, positionMS: Int64? = nil, volume: Int? = nil, passthrough: Bool? = nil,
        load: LoadReport? = nil, layerID: UInt64? = nil, artist: String? = nil
    ) {
        self.artist = Self.bounded(artist, Limit.artist)
        self.type = type
        self.sessionID = sessionID
        self.playID = playID
        self.reason = reason
        self.code = Self.bounded(code, Limit.code)
        self.message = Self.bounded(message, Limit.message)
        self.url = Self.bounded(url, Limit.url)
        self.title = Self.bounded(title, Limit.title)
        self.durationMS = durationMS
        self.positionMS = positionMS
        self.volume = volume
        self.passthrough = passthrough
        self.load = load
        self.layerID = layerID
    }

    enum CodingKeys: String, CodingKey {
        case type
        case sessionID = "session_id"
        case playID = "play_id"
        case reason, code, message, url, title, artist
        case durationMS = "duration_ms"
        case positionMS = "position_ms"
        case volume, passthrough, load
        case layerID = "layer_id"
    }

    /// `text` cut to at most `limit` UTF-8 bytes at a character boundary, ending in "…" if cut.
    public static func bounded(_ text: String?, _ limit: Int) -> String? {
        guard let text, text.utf8.count > limit else { return text }
        let ellipsis = "…"
        var kept = ""
        for character in text {
            if kept.utf8.count + character.utf8.count + ellipsis.utf8.count > limit { break }
            kept.append(character)
        }
        return kept + ellipsis
    }

    /// The event as one JSON object, without the trailing newline.
    public func jsonLine() -> String {
        // Encoding a struct of strings, numbers and booleans cannot fail.
        let data = (try? JSONFormat.encoder.encode(self)) ?? Data("{}".utf8)
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
