// FFmpeg's function-like macros and inline helpers that Swift cannot import, as plain functions.
#ifndef TONEARM_CFFMPEG_SHIM_H
#define TONEARM_CFFMPEG_SHIM_H
#include <libavformat/avformat.h>
#include <libavcodec/avcodec.h>
#include <libswresample/swresample.h>
#include <libavutil/avutil.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/error.h>
#include <errno.h>

static inline int tonearm_averror_eagain(void) { return AVERROR(EAGAIN); }
static inline int tonearm_averror_eof(void) { return AVERROR_EOF; }
static inline int tonearm_averror_invaliddata(void) { return AVERROR_INVALIDDATA; }
static inline int tonearm_averror_eio(void) { return AVERROR(EIO); }
static inline int64_t tonearm_av_nopts_value(void) { return AV_NOPTS_VALUE; }

/// The stereo layout the engine resamples to.
static inline void tonearm_stereo_layout(AVChannelLayout *layout) {
    AVChannelLayout stereo = AV_CHANNEL_LAYOUT_STEREO;
    *layout = stereo;
}

/// A human-readable message for an FFmpeg error code.
static inline void tonearm_av_strerror(int code, char *buf, size_t size) {
    av_strerror(code, buf, size);
}
#endif
