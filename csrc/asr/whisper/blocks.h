// What Whisper's encoder and decoder layers share beyond csrc/nn: the LayerNorm epsilon, the
// pre-LN GELU MLP with its residual, and the products over a window's frames.
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

// y [n, out] = x [n, in] W^T + bias, then GELU when `gelu`, for a product over a window's
// frames (the encoder's linears, the cross-attention K/V). The float32 lane takes
// cpu::matmul_f32_blocked (bias and GELU applied as the outputs are stored) where the CPU has
// its kernel and the weights are float32 rows; otherwise nn::linear and nn::gelu_erf.
void frames_linear(const nn::Linear& l, const float* x, int64_t n, float* y,
                   cpu::Precision precision, ThreadPool& pool, bool gelu = false);

// The encoder's MLP over n frames: x [n, d] += fc2(gelu_erf(fc1(layer_norm(x)))) through
// frames_linear. Working rows as residual_mlp's.
void frames_mlp(const Norm& ln, const nn::Linear& fc1, const nn::Linear& fc2, float* x,
                int64_t n, int64_t d, cpu::Precision precision, ThreadPool& pool, float* h,
                float* ff, float* out);

}  // namespace dasllama::whisper
