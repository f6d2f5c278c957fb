// libavcodec + libswresample behind one Swift type: takes a source's audio packets from a
// `PacketSource` (the demuxer, or a network source's demux thread) and hands out either the
// compressed packets (for Opus passthrough) or 20 ms frames of 48 kHz stereo interleaved floats
// (for everything else). Seeks land on the exact 20 ms frame asked for.
import CFFmpeg

func ffmpegErrorText(_ code: Int32) -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    tonearm_av_strerror(code, &buffer, buffer.count)
    return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// One compressed packet of the audio stream.
public struct CompressedPacket: Sendable, Equatable {
    public var data: [UInt8]
    /// Presentation time in milliseconds from the start, when known.
    public var positionMS: Int64?
}

/// What asking a source for more gave.
enum Next<Value> {
    case value(Value)
    /// The source has no more.
    case end
    /// Not there yet (a network source behind): ask again later.
    case pending
}

/// Decodes one source's audio stream, whose packets come from a `PacketSource`. Use either
/// `readPacket()` or `readFrame(into:)` at a time; `seek` resets both.
final class MediaDecoder {
    let info: MediaInfo
    private let stream: AudioStream
    private let source: any PacketSource

    private var codec: UnsafeMutablePointer<AVCodecContext>?
    private var resampler: OpaquePointer?
    /// The input the resampler is set up for. Decoders may change channels, rate or sample format
    /// between frames (AC-3 and AAC streams do where a broadcast switches programmes); a frame
    /// that differs rebuilds the resampler instead of being read with the wrong shape.
    private var resamplerLayout = AVChannelLayout()
    private var resamplerFormat = AV_SAMPLE_FMT_NONE
    private var resamplerRate: Int32 = 0
    private let packet: UnsafeMutablePointer<AVPacket>
    private let frame: UnsafeMutablePointer<AVFrame>

    /// Resampled interleaved samples not yet handed out; `fifoStart` is the first unread one.
    private var fifo: [Float] = []
    private var fifoStart = 0
    private var demuxerDone = false
    private var decoderDrained = false
    private var resamplerDrained = false
    /// After a seek: output samples before this position (in 48 kHz samples) are dropped.
    private var discardBefore: Int64?

    /// Decodes what `source` hands out. An Opus source is passed through or decoded by libopus
    /// (`Pipeline`): FFmpeg's decoder, the resampler and the sample FIFO are opened only if
    /// `readFrame` is ever called, which keeps them out of a passthrough session's memory. Any
    /// other source opens them now, so a codec FFmpeg cannot decode is refused at once.
    init(info: MediaInfo, stream: AudioStream, source: any PacketSource) throws(MediaError) {
        guard let packet = av_packet_alloc(), let frame = av_frame_alloc() else {
            throw MediaError(kind: .openFailed, message: "out of memory")
        }
        self.packet = packet
        self.frame = frame
        self.info = info
        self.stream = stream
        self.source = source
        // (A throw from here on runs deinit, which frees what is open.)
        if !info.isOpusStereo48k { try openDecoder() }
    }

    /// A local file, demuxed on the caller's thread.
    convenience init(path: String) throws(MediaError) {
        let demuxer = try MediaDemuxer(path: path)
        try self.init(info: demuxer.info, stream: demuxer.stream, source: demuxer)
    }

    /// Opens FFmpeg's decoder for the audio stream and the resampler to 48 kHz stereo.
    private func openDecoder() throws(MediaError) {
        guard codec == nil else { return }
        var context = avcodec_alloc_context3(stream.decoder)
        var status = avcodec_parameters_to_context(context, stream.parameters)
        if status >= 0 { status = avcodec_open2(context, stream.decoder, nil) }
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
        try makeResampler(layout: &opened.pointee.ch_layout, format: opened.pointee.sample_fmt, rate: opened.pointee.sample_rate)
        fifo.reserveCapacity(OpusEncoder.frameFloats * 4)
    }

    deinit {
        swr_free(&resampler)
        av_channel_layout_uninit(&resamplerLayout)
        avcodec_free_context(&codec)
        var p: UnsafeMutablePointer<AVPacket>? = packet
        av_packet_free(&p)
        var f: UnsafeMutablePointer<AVFrame>? = frame
        av_frame_free(&f)
    }

    // MARK: Compressed packets

    /// The next compressed packet of the audio stream.
    func readPacket() throws(MediaError) -> Next<CompressedPacket> {
        switch try source.next(into: packet) {
        case .end: return .end
        case .pending: return .pending
        case .packet:
            defer { av_packet_unref(packet) }
            let data = Array(UnsafeBufferPointer(start: packet.pointee.data, count: Int(max(packet.pointee.size, 0))))
            return .value(CompressedPacket(data: data, positionMS: stream.positionMS(packet.pointee.pts)))
        }
    }

    // MARK: Decoded frames

    /// Writes the next 20 ms into `output` (resized to `OpusEncoder.frameFloats`) and says how
    /// many of its floats are the source's: the last frame of a source is padded with silence.
    @discardableResult
    func readFrame(into output: inout [Float]) throws(MediaError) -> Next<Int> {
        try openDecoder()
        let needed = OpusEncoder.frameFloats
        while fifo.count - fifoStart < needed && !resamplerDrained {
            guard try produce() else { return .pending }
        }
        let available = fifo.count - fifoStart
        guard available > 0 else { return .end }
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
        return .value(take)
    }

    /// Moves to `positionMS`. The next decoded frame starts exactly there; the next compressed
    /// packet is the first whose start is at or after it (the caller skips earlier ones).
    /// How far before a seek's target decoding starts (Opus asks for 80 ms, RFC 7845 §4.6).
    static let seekPrerollMS: Int64 = 100

    func seek(toMS positionMS: Int64) throws(MediaError) {
        let target = min(max(0, positionMS), MediaTime.maxMS)
        // Decoding starts a little before the target and what precedes it is dropped: MP3's bit
        // reservoir, AAC's and Vorbis's overlapping windows and Opus's convergence need the
        // frames before (started on the target, an MP3's first frame came out silent).
        try source.seek(toMS: max(0, target - Self.seekPrerollMS))
        if let codec {
            avcodec_flush_buffers(codec)
            // swr_init on a set-up resampler empties it (its delay line holds audio from before
            // the seek) and keeps its input and output.
            let status = swr_init(resampler)
            guard status >= 0 else { throw .ffmpeg(.decodeFailed, "cannot reset the resampler", status) }
        }
        fifo.removeAll(keepingCapacity: true)
        fifoStart = 0
        demuxerDone = false
        decoderDrained = false
        resamplerDrained = false
        discardBefore = MediaTime.samples(ms: target)
    }

    /// Decodes at least one more frame into the FIFO, or advances the end-of-stream drain;
    /// false when the source has no packet ready yet.
    private func produce() throws(MediaError) -> Bool {
        guard let codec else { return true }
        if decoderDrained {
            // The decoder is empty: flush the resampler's delay line once.
            try resample(input: nil, count: 0, startSample: nil)
            resamplerDrained = true
            return true
        }
        let received = avcodec_receive_frame(codec, frame)
        if received >= 0 {
            defer { av_frame_unref(frame) }
            try followFrameFormat()
            let start = stream.positionMS(frame.pointee.best_effort_timestamp).map(MediaTime.samples(ms:))
            try resample(input: frame.pointee.extended_data, count: frame.pointee.nb_samples, startSample: start)
            return true
        }
        if received == tonearm_averror_eof() {
            decoderDrained = true
            return true
        }
        guard received == tonearm_averror_eagain() else {
            throw .ffmpeg(.decodeFailed, "decoding failed", received)
        }
        if demuxerDone { return true }
        switch try source.next(into: packet) {
        case .pending:
            return false
        case .end:
            demuxerDone = true
            avcodec_send_packet(codec, nil)
            return true
        case .packet:
            break
        }
        defer { av_packet_unref(packet) }
        let sent = avcodec_send_packet(codec, packet)
        // A corrupt packet is skipped, as every player does; a hard failure ends the source.
        if sent < 0 && sent != tonearm_averror_eagain() && sent != tonearm_averror_invaliddata() {
            throw .ffmpeg(.decodeFailed, "decoding failed", sent)
        }
        return true
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
                let planes = Int(max(resamplerLayout.nb_channels, 1))
                return input.withMemoryRebound(to: UnsafePointer<UInt8>?.self, capacity: planes) { inPointer in
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

    /// Rebuilds the resampler when the decoded frame's channels, rate or sample format are not the
    /// ones it was set up for. (The old resampler's few buffered samples are dropped: a click's
    /// worth at a programme change, which is where this happens.)
    private func followFrameFormat() throws(MediaError) {
        var layout = AVChannelLayout()
        defer { av_channel_layout_uninit(&layout) }
        if frame.pointee.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC {
            av_channel_layout_default(&layout, max(frame.pointee.ch_layout.nb_channels, 1))
        } else if av_channel_layout_copy(&layout, &frame.pointee.ch_layout) < 0 {
            throw MediaError(kind: .decodeFailed, message: "the decoder gave an unreadable channel layout")
        }
        let format = AVSampleFormat(rawValue: frame.pointee.format)
        guard format != resamplerFormat || frame.pointee.sample_rate != resamplerRate
            || av_channel_layout_compare(&layout, &resamplerLayout) != 0
        else { return }
        try makeResampler(layout: &layout, format: format, rate: frame.pointee.sample_rate)
    }

    /// Sets up resampling from `layout`, `format` and `rate` to 48 kHz stereo floats.
    private func makeResampler(
        layout: UnsafeMutablePointer<AVChannelLayout>, format: AVSampleFormat, rate: Int32
    ) throws(MediaError) {
        var swr: OpaquePointer?
        var stereo = AVChannelLayout()
        tonearm_stereo_layout(&stereo)
        var status = swr_alloc_set_opts2(&swr, &stereo, AV_SAMPLE_FMT_FLT, OpusEncoder.sampleRate, layout, format, rate, 0, nil)
        if status >= 0 { status = swr_init(swr) }
        guard status >= 0, swr != nil else {
            swr_free(&swr)
            throw .ffmpeg(.decodeFailed, "cannot resample \(rate) Hz audio to 48 kHz stereo", status)
        }
        var kept = AVChannelLayout()
        guard av_channel_layout_copy(&kept, layout) >= 0 else {
            swr_free(&swr)
            throw MediaError(kind: .decodeFailed, message: "out of memory")
        }
        swr_free(&resampler)
        resampler = swr
        av_channel_layout_uninit(&resamplerLayout)
        resamplerLayout = kept
        resamplerFormat = format
        resamplerRate = rate
    }
}
