// What a source turned out to hold: the description a play reports, and the audio stream's codec
// parameters, owned apart from the demuxer that found them.
import CFFmpeg
import Foundation

/// What the container says about a source.
public struct MediaInfo: Sendable, Equatable {
    public var title: String?
    /// The container's or the stream's `artist` tag.
    public var artist: String? = nil
    public var durationMS: Int64?
    public var codec: String
    public var sampleRate: Int
    public var channels: Int
    /// Opus at 48 kHz in stereo: its packets may go out untouched.
    public var isOpusStereo48k: Bool
    /// The track's loudness in LUFS as its ReplayGain or R128 tag gives it, if it has one.
    public var taggedLoudness: Double? = nil
}

/// The audio stream's codec parameters and time base, owned apart from the demuxer.
///
/// `@unchecked Sendable`: immutable after init; the parameters are a private copy.
final class AudioStream: @unchecked Sendable {
    let parameters: UnsafeMutablePointer<AVCodecParameters>
    let decoder: UnsafePointer<AVCodec>
    let timeBase: AVRational
    /// The stream's first timestamp (0 when unknown).
    let startTime: Int64

    init?(_ stream: UnsafeMutablePointer<AVStream>, decoder: UnsafePointer<AVCodec>) {
        guard let parameters = avcodec_parameters_alloc() else { return nil }
        guard avcodec_parameters_copy(parameters, stream.pointee.codecpar) >= 0 else {
            var p: UnsafeMutablePointer<AVCodecParameters>? = parameters
            avcodec_parameters_free(&p)
            return nil
        }
        self.parameters = parameters
        self.decoder = decoder
        timeBase = stream.pointee.time_base
        startTime = stream.pointee.start_time == tonearm_av_nopts_value() ? 0 : stream.pointee.start_time
    }

    deinit {
        var p: UnsafeMutablePointer<AVCodecParameters>? = parameters
        avcodec_parameters_free(&p)
    }

    /// `ticks` of the stream's time base in ms, within ±`MediaTime.maxMS` (a source's timestamps
    /// and time base can be anything; av_rescale_q answers INT64_MIN when it overflows).
    func milliseconds(_ ticks: Int64) -> Int64 {
        MediaTime.clamped(av_rescale_q(ticks, timeBase, AVRational(num: 1, den: 1000)))
    }

    /// The position of a packet or frame timestamp, in ms from the start; nil when unknown.
    func positionMS(_ pts: Int64) -> Int64? {
        pts == tonearm_av_nopts_value() ? nil : milliseconds(MediaTime.difference(pts, startTime))
    }
}
