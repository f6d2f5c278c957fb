// A failure to open or decode a source, with the code a play's `error` event reports.
import CFFmpeg

/// A failure to open or decode a source.
public struct MediaError: Error, CustomStringConvertible, Equatable {
    public enum Kind: String, Sendable {
        case openFailed = "source_open_failed"
        case noAudio = "no_audio_stream"
        case decodeFailed = "decode_failed"
        case readFailed = "source_read_failed"
        case unsupported = "unsupported_source"
        /// A hop of a network source led to an address the policy refuses.
        case refused = "private_address"
        /// The source did not open within the deadline (TONEARM_RESOLVE_TIMEOUT).
        case timedOut = "source_timeout"
    }
    public let kind: Kind
    public let message: String
    public var description: String { message }

    static func ffmpeg(_ kind: Kind, _ what: String, _ code: Int32) -> MediaError {
        MediaError(kind: kind, message: "\(what): \(ffmpegErrorText(code))")
    }
}
