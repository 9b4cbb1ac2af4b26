// Kokoro's ALBERT text encoder (reference: ReferenceKokoro.albert / albert_layer): word, token
// type (all 0) and position embeddings, LayerNorm, a linear up to the hidden width, then one
// shared transformer layer applied kokoro.bert.layers times, and bert_encoder down to 512:
//     ids [T] -> d_en [T, 512]
// The layer: q, k, v linears; q and k each scaled by sqrt(1 / sqrt(head_dim)) as the graph
// does; softmax(q k^T) v per head (float32 products through cpu/matmul, whose summation
// order is not the reference's BLAS: last bits differ); dense;
// LayerNorm(h + a); GELU(ffn(a) + bias) (FastGelu, the tanh form, or the erf form, as
// kokoro.bert.activation says); ffn_output; LayerNorm(f + a). Every linear and embedding runs
// in its tensor's lane (weight_ops.h: MatMulInteger for I8, float32 for F32).
#pragma once

#include <cstdint>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

class Albert {
public:
    Albert() = default;
    static Albert load(const KokoroWeights& w);

    int64_t hidden() const { return mapping_.out(); }
    int64_t out_width() const { return project_.out(); }
    int64_t layers() const { return layers_; }
    int64_t max_positions() const { return pos_.rows(); }

    // ids [t] (boundary ids included) -> d_en [t, out_width()]; layers < 0: the file's count.
    std::vector<float> forward(const int64_t* ids, int64_t t, ThreadPool* pool,
                               int64_t layers = -1) const;
    // The embeddings and the mapping to the hidden width: [t, hidden()].
    std::vector<float> embed(const int64_t* ids, int64_t t, ThreadPool* pool) const;
    // One application of the shared layer: h [t, hidden()] -> [t, hidden()].
    std::vector<float> layer(const float* h, int64_t t, ThreadPool* pool) const;
    // bert_encoder: h [t, hidden()] -> [t, out_width()].
    std::vector<float> project(const float* h, int64_t t, ThreadPool* pool) const;

private:
    int64_t layers_ = 0, heads_ = 0;
    bool gelu_erf_ = false;   // the feed-forward activation: erf GELU, else FastGelu (tanh)
    Embedding word_, type_, pos_;
    const float *emb_ln_w_ = nullptr, *emb_ln_b_ = nullptr;
    float emb_eps_ = 1e-12f;
    // q, k and v as one linear of 3 x hidden outputs: the graph quantizes the same h for each,
    // so one quantization serves all three with the same bits.
    Linear mapping_, qkv_, dense_, ffn_, ffn_out_, project_;
    const float *ffn_bias_ = nullptr;
    const float *attn_ln_w_ = nullptr, *attn_ln_b_ = nullptr, *full_ln_w_ = nullptr,
                *full_ln_b_ = nullptr;
    float attn_eps_ = 1e-12f, full_eps_ = 1e-12f;
};

}  // namespace dasllama::kokoro
