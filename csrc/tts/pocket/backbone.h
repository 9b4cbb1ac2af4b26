// The FlowLM backbone of Pocket TTS: a causal pre-norm transformer over prompt rows (a
// voice's, then the text's) and then one row per generated frame.
//
//   prompt:  rows [T, D] -> K/V cache (the outputs are not read, so the last layer computes
//            only its K and V)
//   frame:   previous latent [L] (lm.bos for the first) -> lm.input -> transformer -> out_norm
//            (-> z_proj) = the conditioning c [Z]; the EOS logit is eos . c + bias
//
// The state is a KVCache (f32 rows; kv_cache_append_rows is the way rows enter it). A voice's
// rows are a prefix of it; a synthesis appends after them and forgets by truncating back.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/matmul.h"
#include "llm/kv_cache.h"
#include "tts/pocket/blocks.h"
#include "tts/pocket/config.h"
#include "tts/pocket/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::pocket {

class Backbone {
public:
    Backbone(const PocketConfig& c, const PocketWeights& w, int n_threads);

    // A state able to hold `n_ctx` positions.
    std::unique_ptr<KVCache> new_state(int64_t n_ctx) const;
    // Grows `state` to hold at least n_ctx positions, its rows carried over through
    // kv_cache_append_rows.
    void ensure_capacity(std::unique_ptr<KVCache>& state, int64_t n_ctx) const;

    // The lookup table's rows of token ids [n, D] (then the low-rank projection when present).
    // Throws ShapeError naming an id outside [0, n_bins].
    void text_rows(const int32_t* ids, int64_t n, float* rows, ThreadPool& pool) const;

    // Rows [n, D] into the state at positions state.n_past()... full_last_layer: compute the
    // last layer in full (its output is discarded; for the test that the cut changes nothing).
    void prompt(KVCache& state, const float* rows, int64_t n, ThreadPool& pool,
                bool full_last_layer = false);

    // One frame: latent [L] (nullptr: lm.bos) -> conditioning c [Z].
    void frame_step(KVCache& state, const float* latent, float* cond, ThreadPool& pool);

    float eos_logit(const float* cond) const;

    void set_precision(cpu::Precision p) { precision_ = p; }
    cpu::Precision precision() const { return precision_; }

private:
    const PocketConfig& c_;
    const PocketWeights& w_;
    TransformerRunner runner_;
    cpu::Precision precision_ = cpu::Precision::kF32;
    std::vector<float> x_, h_;
};

}  // namespace dasllama::pocket
