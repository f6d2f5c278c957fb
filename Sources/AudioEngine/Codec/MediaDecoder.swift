// libavformat + libavcodec + libswresample behind one Swift type: opens a source, decodes its
// best audio stream and hands out 20 ms frames of 48 kHz stereo interleaved floats.
import CFFmpeg

/// A failure to open or decode a source.
public struct MediaError: Error, CustomStringConvertible, Equatable {
    public enum Kind: String, Sendable {
        case openFailed = "source_open_failed"
        case noAudio = "no_audio_stream"
        case decodeFailed = "decode_failed"
    }
    public let kind: Kind
    public let message: String
    public var description: String { message }

    static func ffmpeg(_ kind: Kind, _ what: String, _ code: Int32) -> MediaError {
        var buffer = [CChar](repeating: 0, count: 256)
        tonearm_av_strerror(code, &buffer, buffer.count)
        let text = buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        return MediaError(kind: kind, message: "\(what): \(text)")
    }
}

/// What the container says about a source.
public struct MediaInfo: Sendable, Equatable {
    public var title: String?
    public var durationMS: Int64?
    public var codec: String
    public var sampleRate: Int
    public var channels: Int
}

/// Decodes one source to 48 kHz stereo float frames of `OpusEncoder.frameFloats` samples.
public final class MediaDecoder {
    public let info: MediaInfo

    private var format: UnsafeMutablePointer<AVFormatContext>?
    private var codec: UnsafeMutablePointer<AVCodecContext>?
    private var resampler: OpaquePointer?
    private let packet: UnsafeMutablePointer<AVPacket>
    private let frame: UnsafeMutablePointer<AVFrame>
    private let streamIndex: Int32

    /// Resampled interleaved samples not yet handed out; `fifoStart` is the first unread one.
    private var fifo: [Float] = []
    private var fifoStart = 0
    private var demuxerDone = false
    private var decoderDrained = false
    private var resamplerDrained = false

    /// FFmpeg logs to stderr by default; the engine reports failures itself.
    private static let quietLogs: Void = av_log_set_level(AV_LOG_ERROR)

    /// Opens `url` (a file path or anything libavformat reads) and prepares to decode its audio.
    public init(url: String) throws(MediaError) {
        Self.quietLogs
        guard let packet = av_packet_alloc(), let frame = av_frame_alloc() else {
            throw MediaError(kind: .openFailed, message: "out of memory")
        }
        self.packet = packet
        self.frame = frame
        var format: UnsafeMutablePointer<AVFormatContext>?
        var status = avformat_open_input(&format, url, nil, nil)
        guard status >= 0, let format else {
            av_packet_free_wrapper(packet, frame)
            throw .ffmpeg(.openFailed, "cannot open the source", status)
        }
        self.format = format
        status = avformat_find_stream_info(format, nil)
        var decoderCodec: UnsafePointer<AVCodec>?
        let index = av_find_best_stream(format, AVMEDIA_TYPE_AUDIO, -1, -1, &decoderCodec, 0)
        guard index >= 0, let decoderCodec else {
            var f: UnsafeMutablePointer<AVFormatContext>? = format
            avformat_close_input(&f)
            av_packet_free_wrapper(packet, frame)
            throw MediaError(kind: .noAudio, message: "the source has no audio stream that can be decoded")
        }
        self.streamIndex = index
        let stream = format.pointee.streams[Int(index)]!
        let context = avcodec_alloc_context3(decoderCodec)
        self.codec = context
        status = avcodec_parameters_to_context(context, stream.pointee.codecpar)
        if status >= 0 { status = avcodec_open2(context, decoderCodec, nil) }
        guard status >= 0, let context else {
            var c = context
            avcodec_free_context(&c)
            var f: UnsafeMutablePointer<AVFormatContext>? = format
            avformat_close_input(&f)
            av_packet_free_wrapper(packet, frame)
            throw .ffmpeg(.openFailed, "cannot open the audio decoder", status)
        }
        if context.pointee.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC {
            let channels = context.pointee.ch_layout.nb_channels
            av_channel_layout_uninit(&context.pointee.ch_layout)
            av_channel_layout_default(&context.pointee.ch_layout, max(channels, 1))
        }
        var swr: OpaquePointer?
        var stereo = AVChannelLayout()
        tonearm_stereo_layout(&stereo)
        status = swr_alloc_set_opts2(
            &swr, &stereo, AV_SAMPLE_FMT_FLT, OpusEncoder.sampleRate,
            &context.pointee.ch_layout, context.pointee.sample_fmt, context.pointee.sample_rate, 0, nil)
        if status >= 0 { status = swr_init(swr) }
        guard status >= 0, swr != nil else {
            swr_free(&swr)
            var c: UnsafeMutablePointer<AVCodecContext>? = context
            avcodec_free_context(&c)
            var f: UnsafeMutablePointer<AVFormatContext>? = format
            avformat_close_input(&f)
            av_packet_free_wrapper(packet, frame)
            throw .ffmpeg(.openFailed, "cannot set up resampling to 48 kHz stereo", status)
        }
        self.resampler = swr

        let duration = format.pointee.duration
        let codecName = String(cString: avcodec_get_name(context.pointee.codec_id))
        self.info = MediaInfo(
            title: Self.metadata("title", format.pointee.metadata) ?? Self.metadata("title", stream.pointee.metadata),
            durationMS: duration > 0 ? duration / 1000 : nil,
            codec: codecName,
            sampleRate: Int(context.pointee.sample_rate),
            channels: Int(context.pointee.ch_layout.nb_channels))
        fifo.reserveCapacity(OpusEncoder.frameFloats * 4)
    }

    deinit {
        swr_free(&resampler)
        avcodec_free_context(&codec)
        avformat_close_input(&format)
        av_packet_free_wrapper(packet, frame)
    }

    /// Writes the next 20 ms into `output` (resized to `OpusEncoder.frameFloats`). The last frame
    /// of a source is padded with silence. Returns false once the source has no more audio.
    public func readFrame(into output: inout [Float]) throws(MediaError) -> Bool {
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

    /// Decodes at least one more frame into the FIFO, or advances the end-of-stream drain.
    private func produce() throws(MediaError) {
        guard let format, let codec else { return }
        if decoderDrained {
            // The decoder is empty: flush the resampler's delay line once.
            try resample(input: nil, count: 0)
            resamplerDrained = true
            return
        }
        let received = avcodec_receive_frame(codec, frame)
        if received >= 0 {
            try resample(input: frame.pointee.extended_data, count: frame.pointee.nb_samples)
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
            // End of input (or a read error at the end): drain what the decoder still holds.
            demuxerDone = true
            avcodec_send_packet(codec, nil)
            return
        }
        defer { av_packet_unref(packet) }
        guard packet.pointee.stream_index == streamIndex else { return }
        let sent = avcodec_send_packet(codec, packet)
        // A corrupt packet is skipped like every player does; a hard failure ends the source.
        if sent < 0 && sent != tonearm_averror_eagain() && sent != tonearm_averror_invaliddata() {
            throw .ffmpeg(.decodeFailed, "decoding failed", sent)
        }
    }

    private func resample(
        input: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>?, count: Int32
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
    }

    private static func metadata(_ key: String, _ dictionary: OpaquePointer?) -> String? {
        guard let entry = av_dict_get(dictionary, key, nil, 0), let value = entry.pointee.value else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }
}

private func av_packet_free_wrapper(_ packet: UnsafeMutablePointer<AVPacket>, _ frame: UnsafeMutablePointer<AVFrame>) {
    var p: UnsafeMutablePointer<AVPacket>? = packet
    av_packet_free(&p)
    var f: UnsafeMutablePointer<AVFrame>? = frame
    av_frame_free(&f)
}
