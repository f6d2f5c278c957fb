// The controls of a session's current play, as the Router sends them: `POST /session/{id}/<name>`
// with the body the engine's route decodes (`PlayTarget`, `SeekRequest`, `VolumeRequest`, `Filters`,
// `NormalizeRequest`; `end_at` takes a `SeekRequest`'s fields: a position, and the play).

/// One control of an engine session.
public enum SessionControl: Sendable, Equatable, CustomStringConvertible {
    case pause(playID: UInt64?)
    case resume(playID: UInt64?)
    case stop
    case seek(positionMS: Int64, playID: UInt64?)
    case volume(Int)
    case filters(Filters)
    case normalize(Bool)
    case cue(Bool)
    /// Where the current play ends (nil: where its track does).
    case endAt(positionMS: Int64?, playID: UInt64?)

    /// The last path segment of the control's route.
    public var name: String {
        switch self {
        case .pause: "pause"
        case .resume: "resume"
        case .stop: "stop"
        case .seek: "seek"
        case .volume: "volume"
        case .filters: "filters"
        case .normalize: "normalize"
        case .cue: "cue"
        case .endAt: "end_at"
        }
    }

    /// The JSON body of the request, nil for none.
    public var body: (any Encodable & Sendable)? {
        switch self {
        case .pause(let playID), .resume(let playID): playID.map { PlayTarget(playID: $0) }
        case .stop: nil
        case .seek(let positionMS, let playID): SeekRequest(positionMS: positionMS, playID: playID)
        case .volume(let volume): VolumeRequest(volume: volume)
        case .filters(let filters): filters
        case .normalize(let enabled), .cue(let enabled): NormalizeRequest(enabled: enabled)
        case .endAt(let positionMS, let playID): SeekRequest(positionMS: positionMS, playID: playID)
        }
    }

    /// The name and the body's fields, as a log line or a test reads them: `seek play_id=1 position_ms=20000`.
    public var description: String {
        let fields: [(String, String)] =
            switch self {
            case .pause(let playID), .resume(let playID): playID.map { [("play_id", "\($0)")] } ?? []
            case .stop: []
            case .seek(let positionMS, let playID):
                (playID.map { [("play_id", "\($0)")] } ?? []) + [("position_ms", "\(positionMS)")]
            case .volume(let volume): [("volume", "\(volume)")]
            case .filters(let filters):
                filters.equalizer.map { ("equalizer", "\($0.band):\($0.gain)") } + filters.othersSet.map { ("filter", $0) }
            case .normalize(let enabled), .cue(let enabled): [("enabled", "\(enabled)")]
            case .endAt(let positionMS, let playID):
                (playID.map { [("play_id", "\($0)")] } ?? []) + [("position_ms", positionMS.map { "\($0)" } ?? "none")]
            }
        return ([name] + fields.map { "\($0.0)=\($0.1)" }).joined(separator: " ")
    }
}
