// The libopus calls Swift cannot make directly: opus_encoder_ctl is variadic, so each control
// used by the engine gets a fixed-signature inline wrapper here.
#ifndef TONEARM_COPUS_SHIM_H
#define TONEARM_COPUS_SHIM_H
#include <opus/opus.h>

static inline int tonearm_opus_set_bitrate(OpusEncoder *enc, opus_int32 bps) {
    return opus_encoder_ctl(enc, OPUS_SET_BITRATE(bps));
}
static inline int tonearm_opus_set_complexity(OpusEncoder *enc, opus_int32 complexity) {
    return opus_encoder_ctl(enc, OPUS_SET_COMPLEXITY(complexity));
}
static inline int tonearm_opus_set_signal_music(OpusEncoder *enc) {
    return opus_encoder_ctl(enc, OPUS_SET_SIGNAL(OPUS_SIGNAL_MUSIC));
}
#endif
