// LayerNorm over float32 rows, shared by the speech models (Pocket TTS, Whisper).
#pragma once

#include <cstdint>

namespace dasllama::nn {

// out[r] = (x[r] - mean) / sqrt(var + eps) * w + b for n_rows rows of n floats (biased
// variance; the sums are taken in double). w, b nullptr: no affine part. out may equal x.
void layer_norm(const float* x, const float* w, const float* b, int64_t n_rows, int64_t n,
                double eps, float* out);

}  // namespace dasllama::nn
