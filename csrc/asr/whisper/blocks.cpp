#include "asr/whisper/blocks.h"

#include <cstdint>

#include "cpu/matmul_f32_blocked.h"
#include "cpu/ops.h"
#include "nn/activations.h"
#include "nn/layer_norm.h"

namespace dasllama::whisper {

void residual_mlp(const Norm& ln, const nn::Linear& fc1, const nn::Linear& fc2, float* x,
                  int64_t n, int64_t d, cpu::Precision precision, ThreadPool& pool, float* h,
                  float* ff, float* out) {
    nn::layer_norm(x, ln.w.data(), ln.b.data(), n, d, kLayerNormEps, h);
    nn::linear(fc1, h, n, ff, pool, precision);
    nn::gelu_erf(ff, n * fc1.w.rows, pool);
    nn::linear(fc2, ff, n, out, pool, precision);
    cpu::add(x, out, n * d);
}

namespace {

bool blocked(const nn::Linear& l, cpu::Precision precision) {
    // An int8-lane matrix (l.s8) keeps its float view for the GPU seat; nn::linear multiplies it.
    if (precision != cpu::Precision::kF32 || l.s8 || l.bf16 || !l.w.type ||
        !cpu::matmul_f32_blocked_fast())
        return false;
    const GgmlType t = l.w.type->type;
    const auto at = reinterpret_cast<uintptr_t>(l.w.data);
    return (t == GgmlType::F32 && at % alignof(float) == 0) ||
           (t == GgmlType::F16 && at % alignof(uint16_t) == 0);
}

}  // namespace

void frames_linear(const nn::Linear& l, const float* x, int64_t n, float* y,
                   cpu::Precision precision, ThreadPool& pool, bool gelu) {
    if (blocked(l, precision)) {
        cpu::matmul_f32_blocked(l.w, x, l.w.cols, n, y, l.w.rows, pool,
                                l.bias.empty() ? nullptr : l.bias.data(),
                                gelu ? cpu::F32Activation::kGeluErf : cpu::F32Activation::kNone);
        return;
    }
    nn::linear(l, x, n, y, pool, precision);
    if (gelu) nn::gelu_erf(y, n * l.w.rows, pool);
}

void frames_mlp(const Norm& ln, const nn::Linear& fc1, const nn::Linear& fc2, float* x,
                int64_t n, int64_t d, cpu::Precision precision, ThreadPool& pool, float* h,
                float* ff, float* out) {
    nn::layer_norm(x, ln.w.data(), ln.b.data(), n, d, kLayerNormEps, h);
    frames_linear(fc1, h, n, ff, precision, pool, true);
    frames_linear(fc2, ff, n, out, precision, pool);
    cpu::add(x, out, n * d);
}

}  // namespace dasllama::whisper
