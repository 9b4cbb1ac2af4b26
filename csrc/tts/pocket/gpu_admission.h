// Admission rules of the Pocket TTS GPU seats: pure functions of the config and the call's
// sizes, so they are tested without a model or a device. A rule that fails names the limit;
// the seat then declines with `shape` and the CPU chain serves the call.
//
// The limits are the kernels' (shaders/kernels): attention_f32 holds every score of a query in
// workgroup memory (at most kGpuAttnMaxKeys keys) and one head per workgroup (head_dim even,
// at most kGpuAttnMaxHeadDim); the rotary stamps rotate pairs (even head_dim); conv_tr covers
// strides s <= K <= 2s; the codec's convolutions read their im2col rows in place (stride 1,
// dilation 1) and keep their history in the rows they were given (a call brings at least
// K - 1 rows to each).
#pragma once

#include <cstdint>
#include <string>

#include "tts/pocket/config.h"

namespace dasllama::pocket {

// "" when the kernels cover a transformer's attention with `keys` keys per query at most.
std::string gpu_attention_unfit(const TransformerConfig& c, int64_t keys);

// The prompt seat: `rows` new rows after `n_past` into a device slot of `capacity` positions.
std::string gpu_prompt_unfit(const PocketConfig& c, int64_t n_past, int64_t rows,
                             int64_t capacity);
// The frames seat: `frames` frames after `n_past` positions (slot of `capacity` positions).
std::string gpu_frames_unfit(const PocketConfig& c, int64_t n_past, int64_t frames,
                             int64_t capacity);
// The codec seat: a call of `frames` frames on a decoder whose transformer holds `n_past`
// positions.
std::string gpu_codec_unfit(const PocketConfig& c, int64_t n_past, int64_t frames);

}  // namespace dasllama::pocket
