// Pocket TTS building blocks on float32 rows: norms, activations, linear layers, and the
// pre-norm StreamingTransformer shared by the FlowLM backbone and Mimi's transformers.
// Definitions follow dasllama.reference.pocket_blocks (the package's modules).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "nn/layer_norm.h"
#include "tts/pocket/weights.h"

namespace dasllama {
class KVCache;
class ThreadPool;
}  // namespace dasllama

namespace dasllama::pocket {

// LayerNorm over rows (nn/layer_norm.h, shared with Whisper).
using nn::layer_norm;
// The flow head's time-embedding "RMSNorm": x * alpha / sqrt(eps + unbiased var(x)).
void flow_rms_norm(float* x, const float* alpha, int64_t n, double eps);
// GELU (tanh form) and ELU (alpha 1) are the dispatched cpu/ops.h kernels.
void gelu_tanh_inplace(float* x, int64_t n);
void silu_inplace(float* x, int64_t n);
// ELU (alpha 1) of x into out (may equal x).
void elu(const float* x, float* out, int64_t n);

// y[t] = x[t] W^T + bias, for n rows.
void linear(const Linear& l, const float* x, int64_t n, float* y, ThreadPool& pool,
            cpu::Precision precision = cpu::Precision::kF32);

// Runs a StreamingTransformer over rows at positions cache.n_past().., appending every
// layer's rotated keys and values to `cache` through kv_cache_append_rows. Buffers grow to
// the largest call and are reused.
class TransformerRunner {
public:
    TransformerRunner(const TransformerWeights& w, int n_threads);

    // x [n, d_model] in place. kv_only_last: the last layer only stores its K and V (its
    // output is not read: the prompt stage); x then holds the previous layer's output.
    void run(float* x, int64_t n, KVCache& cache, ThreadPool& pool, cpu::Precision precision,
             bool kv_only_last = false);

private:
    void reserve(int64_t n);

    const TransformerWeights& w_;
    int64_t capacity_ = 0;
    std::vector<float> h_, q_, k_, v_, attn_, out_, ff_, cos_, sin_;
    cpu::AttentionScratch scratch_;
};

}  // namespace dasllama::pocket
