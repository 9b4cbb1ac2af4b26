// The CPU forward pass of a text model: token ids in, logits out, K/V rows into the cache.
//
// Prompts run as batched matrix products over chunks of up to max_batch tokens (bounding the
// scratch memory); a single token runs the same code as matrix-vector products. All working
// memory is allocated once, at construction, for max_batch tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "llm/kv_cache.h"
#include "llm/model_config.h"
#include "llm/weights.h"

namespace dasllama {

class KVCache;
class ThreadPool;

// One sequence's rows in a batched step: `n` consecutive tokens that continue `cache` at its
// n_past().
struct SequenceRows {
    KVCache* cache = nullptr;
    int64_t n = 0;
    bool want_logits = false;  // the logits of its last row
};

// What the last rows of a call produce: logits over the vocabulary, or the final hidden states
// (after the output norm; what an embedding pools).
enum class ForwardHead { kLogits, kHidden };

class Forward {
public:
    Forward(const ModelConfig& cfg, const ModelWeights& w, int64_t max_batch, int n_threads);

    // Runs ids[0..n) at positions cache.n_past().. and appends their K/V rows to the cache.
    // logits: [n, n_vocab] when all_logits, else [1, n_vocab] (the last position). ids must
    // be valid and fit the cache (the caller checks). `between_layers`, when set, is called
    // after every layer and may throw to stop; the cache then holds partial rows that the
    // caller truncates.
    void run(const int32_t* ids, int64_t n, KVCache& cache, ThreadPool& pool,
             cpu::Precision precision, bool all_logits, float* logits,
             const std::function<void()>& between_layers = {});

    // One step over rows of several sequences (continuous batching): ids holds each sequence's
    // rows in turn, sum of n at most max_batch(). Every row's K/V enters its own cache and
    // attends over that cache only; the matrix products run over all rows together, and each
    // row's result equals what run() gives that sequence alone. logits: one row of n_vocab per
    // sequence with want_logits, in order.
    void run_batch(const int32_t* ids, const SequenceRows* seqs, int n_seqs, ThreadPool& pool,
                   cpu::Precision precision, float* logits);

    // As run(), writing final hidden states [n, n_embd] (all rows) instead of logits.
    void run_hidden(const int32_t* ids, int64_t n, KVCache& cache, ThreadPool& pool,
                    cpu::Precision precision, float* hidden);

    int64_t max_batch() const { return max_batch_; }
    // Bytes of the per-row working memory allocated at construction for max_batch rows (the
    // activations, rope tables and MoE routing; the attention's per-thread scratch is apart).
    int64_t scratch_bytes() const;

private:
    struct RopeTable {
        double base, scale;
        std::vector<float> cos, sin;  // [max_batch, n_rot / 2]
    };

    // A chunk of rows of one or more sequences. out_rows: the rows whose head output is wanted
    // (ascending); the head writes one row of output per entry.
    void run_chunk(const int32_t* ids, const SequenceRows* seqs, int n_seqs,
                   const std::vector<int64_t>& out_rows, ForwardHead head, float* out,
                   ThreadPool& pool, const std::function<void()>& between_layers);
    // K/V of all n rows enter their caches; q, attention and the output projection run for
    // rows first..n-1 only (out_ row 0 is token `first`; first > 0 only with one sequence).
    void attention_layer(int il, int64_t n, int64_t first, const SequenceRows* seqs, int n_seqs,
                         const int64_t* pos0, ThreadPool& pool);
    void dense_ffn(const LayerWeights& l, int64_t n, ThreadPool& pool);
    void moe_ffn(const LayerWeights& l, int64_t n, ThreadPool& pool);
    const RopeTable& rope_for(const LayerConfig& lc) const;
    void mm(const cpu::WeightMatrix& w, const float* x, int64_t n, float* y, ThreadPool& pool) {
        cpu::matmul(w, x, n, y, pool, precision_);
    }

    const ModelConfig& cfg_;
    const ModelWeights& w_;
    int64_t max_batch_;
    int64_t ffn_rows_ = 0;   // rows of gate_ / up_ (a dense feed-forward runs in such slices)
    cpu::Precision precision_ = cpu::Precision::kFast;

    // Scratch, [max_batch, width] each unless said.
    std::vector<float> x_;       // the residual stream [n_embd]
    std::vector<float> xn_;      // normed input of a block [n_embd]
    std::vector<float> q_, k_, v_;  // [q_dim] [k_dim] [v_dim]
    std::vector<float> attn_;    // attention output [n_head * head_dim_v]
    std::vector<float> out_;     // a block's output [n_embd]
    std::vector<float> gate_, up_;  // [ffn_rows_, n_ff] or [max_batch, n_ff_exp]
    std::vector<RopeTable> ropes_;  // one per distinct (base, scale) of the layers
    std::vector<int64_t> seq_pos0_; // first position of each sequence of a chunk
    std::vector<KVCache::LayerView> views_;   // per sequence of a chunk, the layer's cache
    std::vector<cpu::AttentionJob> jobs_;
    cpu::AttentionScratch attn_scratch_;

    // MoE routing, [max_batch, ...].
    std::vector<float> router_;             // [n_expert]
    std::vector<int32_t> expert_tokens_;    // tokens grouped by expert
    std::vector<float> expert_weights_;     // their routing weights
    std::vector<int64_t> expert_count_;     // [n_expert]
    std::vector<float> gathered_;           // [n_embd] rows of one expert's tokens
    std::vector<float> expert_out_;         // [n_embd]
};

}  // namespace dasllama
