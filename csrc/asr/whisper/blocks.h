// What Whisper's encoder and decoder layers share beyond csrc/nn: the LayerNorm epsilon and
// the pre-LN GELU MLP with its residual.
#pragma once

#include <cstdint>

#include "asr/whisper/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

constexpr double kLayerNormEps = 1e-5;   // every LayerNorm of the model (torch's default)

// x [n, d] += fc2(gelu_erf(fc1(layer_norm(x)))). Working rows the caller owns: h [n, d],
// ff [n, fc1 rows], out [n, d].
void residual_mlp(const Norm& ln, const nn::Linear& fc1, const nn::Linear& fc2, float* x,
                  int64_t n, int64_t d, cpu::Precision precision, ThreadPool& pool, float* h,
                  float* ff, float* out);

}  // namespace dasllama::whisper
