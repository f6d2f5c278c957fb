// libavformat for one source: opens it (a file in the media directory, or a network source's
// read-ahead buffer), says what it holds, and reads and seeks its audio stream. `MediaDecoder`
// turns the packets into samples; for a network source the two run on different threads
// (`SourceDemuxThread`), so what they share is copied out here (`AudioStream`).
import CFFmpeg
import Foundation

/// What reading the next packet gave.
enum PacketRead: Equatable {
    case packet
    case end
    /// Not there yet (a network source behind): ask again later.
    case pending
}

/// Hands out the audio stream's packets: the demuxer itself for files, a demux thread's queue
/// for network sources.
protocol PacketSource: AnyObject {
    /// Fills `packet` (which the caller unrefs) with the next packet of the audio stream.
    func next(into packet: UnsafeMutablePointer<AVPacket>) throws(MediaError) -> PacketRead
    /// Moves to the key frame at or before `positionMS`; the packets that follow start there.
    func seek(toMS positionMS: Int64) throws(MediaError)
}

/// One source's format context.
final class MediaDemuxer: PacketSource {
    let info: MediaInfo
    let stream: AudioStream
    private var format: UnsafeMutablePointer<AVFormatContext>?
    private let streamIndex: Int32

    /// The most channels and the highest sample rate a source may have (7.1 audio; 768 kHz).
    static let maxChannels = 8
    static let maxSampleRate = 768_000
    /// The most memory a stream's seek index may take. FFmpeg adds an entry for each key packet
    /// read (every packet of an audio stream in Matroska/WebM: 1.2 KB a second) and by default
    /// lets the index grow to 1 MiB per session; above this it keeps every second entry instead,
    /// so a seek may land up to a few seconds earlier and read forward from there.
    static let maxIndexBytes: UInt32 = 16 * 1024

    /// FFmpeg logs to stderr by default; the engine reports failures itself.
    private static let quietLogs: Void = av_log_set_level(AV_LOG_ERROR)

    /// Opens a local file. What it may open besides (a playlist's entries) stays local.
    convenience init(path: String) throws(MediaError) {
        try self.init(opening: path, io: nil, nested: nil)
    }

    /// Opens a network source through its read-ahead buffer. `url` names it (a playlist's
    /// relative entries are resolved against it); anything the container asks to open besides
    /// (HLS and DASH segments and playlists) goes through `nested`, which fetches it under the
    /// same policy.
    convenience init(url: String, io: UnsafeMutablePointer<AVIOContext>, nested: NestedInputs) throws(MediaError) {
        try self.init(opening: url, io: io, nested: nested)
    }

    private init(opening url: String, io: UnsafeMutablePointer<AVIOContext>?, nested: NestedInputs?) throws(MediaError) {
        Self.quietLogs
        guard var format = avformat_alloc_context() else { throw MediaError(kind: .openFailed, message: "out of memory") }
        format.pointee.max_index_size = Self.maxIndexBytes
        var options: OpaquePointer?
        if let io {
            format.pointee.pb = io
            // Seek by the container's index or an estimate, not by reading every byte up to the
            // target (FFmpeg's exact mp3 seek does that: at network speed, seconds of silence).
            format.pointee.flags |= AVFMT_FLAG_FAST_SEEK
            if let nested { nested.install(in: format) }
            // Nothing may be opened behind the policy's back: every URL goes through `nested`.
            av_dict_set(&options, "protocol_whitelist", "tonearm-none", 0)
            // The HLS demuxer would reuse connections through FFmpeg's own HTTP client, which
            // `nested` inputs are not (it asserts, and the process aborts): one request each.
            av_dict_set(&options, "http_persistent", "0", 0)
            av_dict_set(&options, "http_multiple", "0", 0)
        } else {
            av_dict_set(&options, "protocol_whitelist", "file", 0)
        }
        var opening: UnsafeMutablePointer<AVFormatContext>? = format
        var status = avformat_open_input(&opening, url, nil, &options)
        av_dict_free(&options)
        // On failure avformat_open_input frees the context (not a custom pb).
        guard status >= 0, let opened = opening else { throw .ffmpeg(.openFailed, "cannot open the source", status) }
        format = opened
        if Self.onlyOpusAudio(format) {
            // Opus from Matroska/WebM or Ogg comes one whole packet per read; FFmpeg's parser would
            // only copy each packet again (profiled: a third of a passthrough session's cost).
            format.pointee.flags |= AVFMT_FLAG_NOPARSE | AVFMT_FLAG_NOFILLIN
        }
        // Until every property is set, deinit does not run: a refusal closes the format itself.
        func refuse(_ error: MediaError) -> MediaError {
            var closing: UnsafeMutablePointer<AVFormatContext>? = format
            avformat_close_input(&closing)
            return error
        }
        status = avformat_find_stream_info(format, nil)
        guard status >= 0 else { throw refuse(.ffmpeg(.openFailed, "cannot read the source's stream parameters", status)) }
        var decoder: UnsafePointer<AVCodec>?
        let index = av_find_best_stream(format, AVMEDIA_TYPE_AUDIO, -1, -1, &decoder, 0)
        guard index >= 0, let decoder, let found = format.pointee.streams[Int(index)],
            let audio = AudioStream(found, decoder: decoder)
        else { throw refuse(MediaError(kind: .noAudio, message: "the source has no audio stream that can be decoded")) }
        self.format = format
        streamIndex = index
        stream = audio
        // Only the chosen stream is demuxed; the rest (video, cover art) is skipped cheaply.
        for i in 0..<Int(format.pointee.nb_streams) where i != Int(index) {
            format.pointee.streams[i]?.pointee.discard = AVDISCARD_ALL
        }
        let parameters = audio.parameters.pointee
        let duration = format.pointee.duration
        let channels = Int(parameters.ch_layout.nb_channels)
        var info = MediaInfo(
            title: Self.metadata("title", format.pointee.metadata) ?? Self.metadata("title", found.pointee.metadata),
            durationMS: duration > 0 ? MediaTime.clamped(duration / 1000) : nil,
            codec: String(cString: avcodec_get_name(parameters.codec_id)),
            sampleRate: Int(parameters.sample_rate),
            channels: channels,
            isOpusStereo48k: parameters.codec_id == AV_CODEC_ID_OPUS && parameters.sample_rate == 48_000 && channels == 2,
            taggedLoudness: Self.taggedLoudness { Self.metadata($0, found.pointee.metadata) ?? Self.metadata($0, format.pointee.metadata) })
        info.artist = Self.metadata("artist", format.pointee.metadata) ?? Self.metadata("artist", found.pointee.metadata)
        self.info = info
        // (A throw from here on runs deinit, which closes the format.)
        guard (0...Self.maxChannels).contains(info.channels), (0...Self.maxSampleRate).contains(info.sampleRate) else {
            throw MediaError(
                kind: .unsupported,
                message: "the audio has \(info.channels) channels at \(info.sampleRate) Hz; Tonearm plays up to "
                    + "\(Self.maxChannels) channels at up to \(Self.maxSampleRate) Hz")
        }
    }

    deinit {
        // A custom pb (a network source's) is not freed here: its owner frees it afterwards.
        avformat_close_input(&format)
    }

    func next(into packet: UnsafeMutablePointer<AVPacket>) throws(MediaError) -> PacketRead {
        guard let format else { return .end }
        while true {
            let read = av_read_frame(format, packet)
            if read == tonearm_averror_eof() { return .end }
            guard read >= 0 else { throw .ffmpeg(.readFailed, "reading the source failed", read) }
            if packet.pointee.stream_index == streamIndex && packet.pointee.size > 0 { return .packet }
            av_packet_unref(packet)
        }
    }

    /// Entries in the audio stream's seek index (bounded by `maxIndexBytes`).
    var indexEntries: Int {
        guard let format, let stream = format.pointee.streams[Int(streamIndex)] else { return 0 }
        return Int(avformat_index_get_entries_count(stream))
    }

    func seek(toMS positionMS: Int64) throws(MediaError) {
        guard let format else { return }
        let target = min(max(0, positionMS), MediaTime.maxMS)
        let timestamp = MediaTime.sum(stream.startTime, av_rescale_q(target, AVRational(num: 1, den: 1000), stream.timeBase))
        let status = av_seek_frame(format, streamIndex, timestamp, AVSEEK_FLAG_BACKWARD)
        guard status >= 0 else { throw .ffmpeg(.readFailed, "seeking failed", status) }
    }

    /// Whether the container's header already names every audio stream as Opus.
    private static func onlyOpusAudio(_ format: UnsafeMutablePointer<AVFormatContext>) -> Bool {
        var audio = 0
        for i in 0..<Int(format.pointee.nb_streams) {
            guard let parameters = format.pointee.streams[i]?.pointee.codecpar.pointee,
                parameters.codec_type == AVMEDIA_TYPE_AUDIO
            else { continue }
            guard parameters.codec_id == AV_CODEC_ID_OPUS else { return false }
            audio += 1
        }
        return audio > 0
    }

    /// The loudness a track's tags state: R128_TRACK_GAIN (Opus; a Q7.8 gain to −23 LUFS) or
    /// REPLAYGAIN_TRACK_GAIN ("-6.5 dB", a gain to 89 dB SPL, taken as −18 LUFS). The text is the
    /// source's, so anything that is not a plain number within ±60 dB is ignored.
    static func taggedLoudness(_ tag: (String) -> String?) -> Double? {
        // A range check, not abs(): abs(Int.min) traps, and "-9223372036854775808" parses to it.
        if let text = tag("R128_TRACK_GAIN"), let q78 = Int(text.trimmingCharacters(in: .whitespaces)),
            (-60 * 256...60 * 256).contains(q78)
        {
            return -23 - Double(q78) / 256
        }
        if var text = tag("REPLAYGAIN_TRACK_GAIN")?.trimmingCharacters(in: .whitespaces) {
            if text.lowercased().hasSuffix("db") { text = String(text.dropLast(2)).trimmingCharacters(in: .whitespaces) }
            if let gain = Double(text), gain.isFinite, abs(gain) <= 60 { return -18 - gain }
        }
        return nil
    }

    private static func metadata(_ key: String, _ dictionary: OpaquePointer?) -> String? {
        guard let entry = av_dict_get(dictionary, key, nil, 0), let value = entry.pointee.value else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }
}
