#include "tts/pocket/backbone.h"

#include <algorithm>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"

namespace dasllama::pocket {

Backbone::Backbone(const PocketConfig& c, const PocketWeights& w, int n_threads)
    : c_(c), w_(w), runner_(w.lm, n_threads) {}

std::unique_ptr<KVCache> Backbone::new_state(int64_t n_ctx) const {
    return std::make_unique<KVCache>(c_.lm.num_layers, std::max<int64_t>(1, n_ctx),
                                     c_.lm.num_kv_heads, c_.lm.head_dim, c_.lm.head_dim,
                                     KVType::F32);
}

void Backbone::ensure_capacity(std::unique_ptr<KVCache>& state, int64_t n_ctx) const {
    if (state && state->n_ctx() >= n_ctx) return;
    // Grow by half again so a run of slightly longer chunks does not copy every time.
    const int64_t want = std::max<int64_t>(n_ctx, state ? state->n_ctx() * 3 / 2 : 0);
    std::unique_ptr<KVCache> grown = new_state(want);
    if (state && state->n_past() > 0) {
        const int64_t n = state->n_past(), kv = c_.lm.num_kv_heads * c_.lm.head_dim;
        std::vector<float> k(size_t(n * kv)), v(size_t(n * kv));
        for (int il = 0; il < int(c_.lm.num_layers); ++il) {
            state->read_layer_rows(il, 0, n, k.data(), v.data());
            grown->kv_cache_append_rows(il, 0, n, k.data(), v.data());
        }
    }
    state = std::move(grown);
}

void Backbone::text_rows(const int32_t* ids, int64_t n, float* rows, ThreadPool& pool) const {
    const int64_t width = w_.text_embd.cols;
    std::vector<float> low(w_.has_text_proj ? size_t(n * width) : 0);
    float* dst = w_.has_text_proj ? low.data() : rows;
    for (int64_t t = 0; t < n; ++t) {
        if (ids[t] < 0 || ids[t] > c_.n_bins)
            throw ShapeError("pocket: token id " + std::to_string(ids[t]) + " at index " +
                             std::to_string(t) + " is outside [0, " + std::to_string(c_.n_bins) +
                             "]");
        cpu::get_row(w_.text_embd, ids[t], dst + t * width);
    }
    if (w_.has_text_proj) cpu::matmul(w_.text_proj, low.data(), n, rows, pool, cpu::Precision::kF32);
}

void Backbone::prompt(KVCache& state, const float* rows, int64_t n, ThreadPool& pool,
                      bool full_last_layer) {
    if (n <= 0) return;
    const int64_t D = c_.lm.d_model;
    if (state.n_past() + n > state.n_ctx())
        throw ShapeError("pocket: the prompt needs " + std::to_string(state.n_past() + n) +
                         " positions, the state holds " + std::to_string(state.n_ctx()));
    x_.assign(rows, rows + n * D);
    runner_.run(x_.data(), n, state, pool, precision_, !full_last_layer);
}

void Backbone::frame_step(KVCache& state, const float* latent, float* cond, ThreadPool& pool) {
    const int64_t D = c_.lm.d_model;
    if (state.n_past() + 1 > state.n_ctx())
        throw ShapeError("pocket: a frame needs position " + std::to_string(state.n_past()) +
                         ", the state holds " + std::to_string(state.n_ctx()));
    x_.resize(size_t(D));
    h_.resize(size_t(D));
    cpu::matmul(w_.input, latent ? latent : w_.bos.data(), 1, x_.data(), pool,
                cpu::Precision::kF32);
    runner_.run(x_.data(), 1, state, pool, precision_);
    float* normed = w_.has_z_proj ? h_.data() : cond;
    layer_norm(x_.data(), w_.out_norm.weight.data(), w_.out_norm.bias.data(), 1, D,
               c_.lm.norm_eps, normed);
    if (w_.has_z_proj) cpu::matmul(w_.z_proj, normed, 1, cond, pool, precision_);
}

float Backbone::eos_logit(const float* cond) const {
    double acc = w_.eos_bias;
    for (int64_t i = 0; i < c_.cond_dim(); ++i) acc += double(cond[i]) * w_.eos_weight[size_t(i)];
    return float(acc);
}

}  // namespace dasllama::pocket
