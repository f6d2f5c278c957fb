// libavformat + libavcodec + libswresample behind one Swift type: opens a source, and hands out
// either its compressed audio packets (for Opus passthrough) or 20 ms frames of 48 kHz stereo
// interleaved floats (for everything else). Seeks land on the exact 20 ms frame asked for.
import CFFmpeg

/// A failure to open or decode a source.
public struct MediaError: Error, CustomStringConvertible, Equatable {
    public enum Kind: String, Sendable {
        case openFailed = "source_open_failed"
        case noAudio = "no_audio_stream"
        case decodeFailed = "decode_failed"
        case readFailed = "source_read_failed"
        case unsupported = "unsupported_source"
    }
    public let kind: Kind
    public let message: String
    public var description: String { message }

    static func ffmpeg(_ kind: Kind, _ what: String, _ code: Int32) -> MediaError {
        MediaError(kind: kind, message: "\(what): \(ffmpegErrorText(code))")
    }
}

func ffmpegErrorText(_ code: Int32) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    tonearm_av_strerror(code, &buffer, buffer.count)
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// What the container says about a source.
public struct MediaInfo: Sendable, Equatable {
    public var title: String?
    public var durationMS: Int64?
    public var codec: String
    public var sampleRate: Int
    public var channels: Int
    /// Opus at 48 kHz in stereo: its packets may go out untouched.
    public var isOpusStereo48k: Bool
}

/// One compressed packet of the audio stream.
public struct CompressedPacket: Sendable, Equatable {
    public var data: [UInt8]
    /// Presentation time in milliseconds from the start, when known.
    public var positionMS: Int64?
}

/// Decodes one source. Use either `readPacket()` or `readFrame(into:)` at a time; `seek` resets both.
public final class MediaDecoder {
    public let info: MediaInfo

    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var codec: UnsafeMutablePointer<AVCodecContext>?
    private var resampler: OpaquePointer?
    private let packet: UnsafeMutablePointer<AVPacket>
    private let frame: UnsafeMutablePointer<AVFrame>
    private let streamIndex: Int32
    private let decoderCodec: UnsafePointer<AVCodec>
    private let parameters: UnsafeMutablePointer<AVCodecParameters>
    private let timeBase: AVRational
    private let startTime: Int64

    /// Resampled interleaved samples not yet handed out; `fifoStart` is the first unread one.
    private var fifo: [Float] = []
    private var fifoStart = 0
    private var demuxerDone = false
    private var decoderDrained = false
    private var resamplerDrained = false
    /// After a seek: output samples before this position (in 48 kHz samples) are dropped.
    private var discardBefore: Int64?

    /// The most channels and the highest sample rate a source may have (7.1 audio; 768 kHz).
    static let maxChannels = 8
    static let maxSampleRate = 768_000

    /// FFmpeg logs to stderr by default; the engine reports failures itself.
    private static let quietLogs: Void = av_log_set_level(AV_LOG_ERROR)

    /// Opens `url` (a file path or anything libavformat reads) with protocol `options`, or reads
    /// through `io` when given (the read-ahead buffer of a network source).
    public init(url: String, options: [String: String] = [:], io: ReadAheadInput? = nil) throws(MediaError) {
        Self.quietLogs
        guard let packet = av_packet_alloc(), let frame = av_frame_alloc() else {
            throw MediaError(kind: .openFailed, message: "out of memory")
        }
        self.packet = packet
        self.frame = frame
        var format = avformat_alloc_context()
        if let io { format?.pointee.pb = io.context }
        var dictionary: OpaquePointer?
        for (key, value) in options { av_dict_set(&dictionary, key, value, 0) }
        var status = avformat_open_input(&format, io == nil ? url : nil, nil, &dictionary)
        av_dict_free(&dictionary)
        guard status >= 0, let format else {
            Self.free(packet, frame)
            throw .ffmpeg(.openFailed, "cannot open the source", status)
        }
        self.format = format
        if Self.onlyOpusAudio(format) {
            // Opus from Matroska/WebM or Ogg comes one whole packet per read; FFmpeg's parser would
            // only copy each packet again (profiled: a third of a passthrough session's cost).
            format.pointee.flags |= AVFMT_FLAG_NOPARSE | AVFMT_FLAG_NOFILLIN
        }
        status = avformat_find_stream_info(format, nil)
        guard status >= 0 else {
            var f: UnsafeMutablePointer<AVFormatContext>? = format
            avformat_close_input(&f)
            Self.free(packet, frame)
            throw .ffmpeg(.openFailed, "cannot read the source's stream parameters", status)
        }
        var decoderCodec: UnsafePointer<AVCodec>?
        let index = av_find_best_stream(format, AVMEDIA_TYPE_AUDIO, -1, -1, &decoderCodec, 0)
        guard index >= 0, let decoderCodec else {
            var f: UnsafeMutablePointer<AVFormatContext>? = format
            avformat_close_input(&f)
            Self.free(packet, frame)
            throw MediaError(kind: .noAudio, message: "the source has no audio stream that can be decoded")
        }
        self.streamIndex = index
        let stream = format.pointee.streams[Int(index)]!
        // Only the chosen stream is demuxed; the rest (video, cover art) is skipped cheaply.
        for i in 0..<Int(format.pointee.nb_streams) where i != Int(index) {
            format.pointee.streams[i]!.pointee.discard = AVDISCARD_ALL
        }
        timeBase = stream.pointee.time_base
        startTime = stream.pointee.start_time == tonearm_av_nopts_value() ? 0 : stream.pointee.start_time
        self.decoderCodec = decoderCodec
        let parameters = stream.pointee.codecpar!
        self.parameters = parameters
        let duration = format.pointee.duration
        let channels = Int(parameters.pointee.ch_layout.nb_channels)
        self.info = MediaInfo(
            title: Self.metadata("title", format.pointee.metadata) ?? Self.metadata("title", stream.pointee.metadata),
            durationMS: duration > 0 ? duration / 1000 : nil,
            codec: String(cString: avcodec_get_name(parameters.pointee.codec_id)),
            sampleRate: Int(parameters.pointee.sample_rate),
            channels: channels,
            isOpusStereo48k: parameters.pointee.codec_id == AV_CODEC_ID_OPUS && parameters.pointee.sample_rate == 48_000
                && channels == 2)
        // An Opus source is passed through or decoded by libopus (`Pipeline`): FFmpeg's decoder,
        // the resampler and the sample FIFO are opened only if `readFrame` is ever called, which
        // keeps them out of a passthrough session's memory. Any other source opens them now, so
        // a codec FFmpeg cannot decode is refused when the play is asked for.
        // (A throw from here on runs deinit, which frees what is open.)
        guard (0...Self.maxChannels).contains(info.channels), (0...Self.maxSampleRate).contains(info.sampleRate) else {
            throw MediaError(
                kind: .unsupported,
                message: "the audio has \(info.channels) channels at \(info.sampleRate) Hz; Tonearm plays up to "
                    + "\(Self.maxChannels) channels at up to \(Self.maxSampleRate) Hz")
        }
        if !info.isOpusStereo48k { try openDecoder() }
    }

    /// Opens FFmpeg's decoder for the audio stream and the resampler to 48 kHz stereo.
    private func openDecoder() throws(MediaError) {
        guard codec == nil else { return }
        var context = avcodec_alloc_context3(decoderCodec)
        var status = avcodec_parameters_to_context(context, parameters)
        if status >= 0 { status = avcodec_open2(context, decoderCodec, nil) }
        guard status >= 0, let opened = context else {
            avcodec_free_context(&context)
            throw .ffmpeg(.openFailed, "cannot open the audio decoder", status)
        }
        if opened.pointee.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC {
            let channels = opened.pointee.ch_layout.nb_channels
            av_channel_layout_uninit(&opened.pointee.ch_layout)
            av_channel_layout_default(&opened.pointee.ch_layout, max(channels, 1))
        }
        codec = opened
        try makeResampler()
        fifo.reserveCapacity(OpusEncoder.frameFloats * 4)
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

    deinit {
        swr_free(&resampler)
        avcodec_free_context(&codec)
        avformat_close_input(&format)
        Self.free(packet, frame)
    }

    // MARK: Compressed packets

    /// The next compressed packet of the audio stream, or nil at the end.
    public func readPacket() throws(MediaError) -> CompressedPacket? {
        guard let format else { return nil }
        while true {
            let read = av_read_frame(format, packet)
            if read == tonearm_averror_eof() { return nil }
            guard read >= 0 else { throw .ffmpeg(.readFailed, "reading the source failed", read) }
            defer { av_packet_unref(packet) }
            guard packet.pointee.stream_index == streamIndex, packet.pointee.size > 0 else { continue }
            let data = Array(UnsafeBufferPointer(start: packet.pointee.data, count: Int(packet.pointee.size)))
            let pts = packet.pointee.pts
            let position: Int64? = pts == tonearm_av_nopts_value() ? nil : milliseconds(MediaTime.difference(pts, startTime))
            return CompressedPacket(data: data, positionMS: position)
        }
    }

    // MARK: Decoded frames

    /// Writes the next 20 ms into `output` (resized to `OpusEncoder.frameFloats`). The last frame
    /// of a source is padded with silence. Returns false once the source has no more audio.
    public func readFrame(into output: inout [Float]) throws(MediaError) -> Bool {
        try openDecoder()
        let needed = OpusEncoder.frameFloats
        while fifo.count - fifoStart < needed && !resamplerDrained {
            try produce()
        }
        let available = fifo.count - fifoStart
        guard available > 0 else { return false }
        if output.count != needed { output = [Float](repeating: 0, count: needed) }
        let take = min(available, needed)
        output.withUnsafeMutableBufferPointer { out in
            fifo.withUnsafeBufferPointer { src in
                out.baseAddress!.update(from: src.baseAddress! + fifoStart, count: take)
                if take < needed { (out.baseAddress! + take).update(repeating: 0, count: needed - take) }
            }
        }
        fifoStart += take
        if fifoStart >= fifo.count / 2 {
            fifo.removeFirst(fifoStart)
            fifoStart = 0
        }
        return true
    }

    /// Moves to `positionMS`. The next decoded frame starts exactly there; the next compressed
    /// packet is the first whose start is at or after it (the caller skips earlier ones).
    public func seek(toMS positionMS: Int64) throws(MediaError) {
        guard let format else { return }
        let target = min(max(0, positionMS), MediaTime.maxMS)
        let timestamp = MediaTime.sum(startTime, av_rescale_q(target, AVRational(num: 1, den: 1000), timeBase))
        let status = av_seek_frame(format, streamIndex, timestamp, AVSEEK_FLAG_BACKWARD)
        guard status >= 0 else { throw .ffmpeg(.readFailed, "seeking failed", status) }
        if let codec {
            avcodec_flush_buffers(codec)
            try makeResampler()
        }
        fifo.removeAll(keepingCapacity: true)
        fifoStart = 0
        demuxerDone = false
        decoderDrained = false
        resamplerDrained = false
        discardBefore = MediaTime.samples(ms: target)
    }

    /// Decodes at least one more frame into the FIFO, or advances the end-of-stream drain.
    private func produce() throws(MediaError) {
        guard let format, let codec else { return }
        if decoderDrained {
            // The decoder is empty: flush the resampler's delay line once.
            try resample(input: nil, count: 0, startSample: nil)
            resamplerDrained = true
            return
        }
        let received = avcodec_receive_frame(codec, frame)
        if received >= 0 {
            let pts = frame.pointee.best_effort_timestamp
            let start: Int64? =
                pts == tonearm_av_nopts_value() ? nil : MediaTime.samples(ms: milliseconds(MediaTime.difference(pts, startTime)))
            try resample(input: frame.pointee.extended_data, count: frame.pointee.nb_samples, startSample: start)
            av_frame_unref(frame)
            return
        }
        if received == tonearm_averror_eof() {
            decoderDrained = true
            return
        }
        guard received == tonearm_averror_eagain() else {
            throw .ffmpeg(.decodeFailed, "decoding failed", received)
        }
        if demuxerDone { return }
        let read = av_read_frame(format, packet)
        if read < 0 {
            if read != tonearm_averror_eof() { throw .ffmpeg(.readFailed, "reading the source failed", read) }
            demuxerDone = true
            avcodec_send_packet(codec, nil)
            return
        }
        defer { av_packet_unref(packet) }
        guard packet.pointee.stream_index == streamIndex else { return }
        let sent = avcodec_send_packet(codec, packet)
        // A corrupt packet is skipped, as every player does; a hard failure ends the source.
        if sent < 0 && sent != tonearm_averror_eagain() && sent != tonearm_averror_invaliddata() {
            throw .ffmpeg(.decodeFailed, "decoding failed", sent)
        }
    }

    /// Converts one decoded frame (or the resampler's tail when `input` is nil) into the FIFO.
    private func resample(
        input: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?, count: Int32, startSample: Int64?
    ) throws(MediaError) {
        let capacity = Int(swr_get_out_samples(resampler, count))
        guard capacity > 0 else { return }
        let start = fifo.count
        fifo.append(contentsOf: repeatElement(0, count: capacity * OpusEncoder.channels))
        let converted = fifo.withUnsafeMutableBufferPointer { buffer in
            var out: UnsafeMutablePointer<UInt8>? = UnsafeMutableRawPointer(buffer.baseAddress! + start)
                .assumingMemoryBound(to: UInt8.self)
            return withUnsafeMutablePointer(to: &out) { outPointer in
                guard let input else { return swr_convert(resampler, outPointer, Int32(capacity), nil, 0) }
                return input.withMemoryRebound(to: UnsafePointer<UInt8>?.self, capacity: 8) { inPointer in
                    swr_convert(resampler, outPointer, Int32(capacity), inPointer, count)
                }
            }
        }
        guard converted >= 0 else {
            fifo.removeLast(capacity * OpusEncoder.channels)
            throw .ffmpeg(.decodeFailed, "resampling failed", converted)
        }
        fifo.removeLast((capacity - Int(converted)) * OpusEncoder.channels)
        // After a seek, drop what precedes the target so playback resumes on the exact frame.
        if let target = discardBefore, let frameStart = startSample {
            let drop = Int(min(max(target - frameStart, 0), Int64(converted)))
            if drop > 0 { fifo.removeSubrange(start..<(start + drop * OpusEncoder.channels)) }
            if frameStart + Int64(converted) >= target { discardBefore = nil }
        } else {
            discardBefore = nil
        }
    }

    private func makeResampler() throws(MediaError) {
        guard let codec else { return }
        swr_free(&resampler)
        var swr: OpaquePointer?
        var stereo = AVChannelLayout()
        tonearm_stereo_layout(&stereo)
        var status = swr_alloc_set_opts2(
            &swr, &stereo, AV_SAMPLE_FMT_FLT, OpusEncoder.sampleRate,
            &codec.pointee.ch_layout, codec.pointee.sample_fmt, codec.pointee.sample_rate, 0, nil)
        if status >= 0 { status = swr_init(swr) }
        guard status >= 0, swr != nil else {
            swr_free(&swr)
            throw .ffmpeg(.openFailed, "cannot set up resampling to 48 kHz stereo", status)
        }
        resampler = swr
    }

    /// `ticks` of the stream's time base in ms, within ±`MediaTime.maxMS` (a source's timestamps
    /// and time base can be anything; av_rescale_q answers INT64_MIN when it overflows).
    private func milliseconds(_ ticks: Int64) -> Int64 {
        MediaTime.clamped(av_rescale_q(ticks, timeBase, AVRational(num: 1, den: 1000)))
    }

    private static func metadata(_ key: String, _ dictionary: OpaquePointer?) -> String? {
        guard let entry = av_dict_get(dictionary, key, nil, 0), let value = entry.pointee.value else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }

    private static func free(_ packet: UnsafeMutablePointer<AVPacket>, _ frame: UnsafeMutablePointer<AVFrame>) {
        var p: UnsafeMutablePointer<AVPacket>? = packet
        av_packet_free(&p)
        var f: UnsafeMutablePointer<AVFrame>? = frame
        av_frame_free(&f)
    }
}
