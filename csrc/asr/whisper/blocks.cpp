#include "asr/whisper/blocks.h"

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

}  // namespace dasllama::whisper
