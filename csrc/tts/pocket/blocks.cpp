#include "tts/pocket/blocks.h"

#include <cmath>

#include "core/thread_pool.h"
#include "llm/kv_cache.h"

namespace dasllama::pocket {

void flow_rms_norm(float* x, const float* alpha, int64_t n, double eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    const double mean = sum / double(n);
    double sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
    const double var = sq / double(n - 1);  // torch's x.var(): the n - 1 denominator
    const float inv = float(1.0 / std::sqrt(eps + var));
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * alpha[i] * inv;
}

void gelu_tanh_inplace(float* x, int64_t n) { cpu::gelu_tanh(x, n); }

void silu_inplace(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void elu(const float* x, float* out, int64_t n) { cpu::elu(x, out, n); }

void linear(const Linear& l, const float* x, int64_t n, float* y, ThreadPool& pool,
            cpu::Precision precision) {
    cpu::matmul(l.w, x, n, y, pool, precision);
    if (!l.bias.empty()) cpu::add_rows(y, nullptr, l.bias.data(), n, l.w.rows);
}

// =============================================================================================
// The transformer
// =============================================================================================

TransformerRunner::TransformerRunner(const TransformerWeights& w, int n_threads)
    : w_(w), scratch_(n_threads, w.cfg.head_dim, w.cfg.head_dim) {}

void TransformerRunner::reserve(int64_t n) {
    if (n <= capacity_) return;
    const TransformerConfig& c = w_.cfg;
    const size_t N = size_t(n);
    h_.resize(N * size_t(c.d_model));
    q_.resize(N * size_t(c.num_heads * c.head_dim));
    k_.resize(N * size_t(c.num_kv_heads * c.head_dim));
    v_.resize(N * size_t(c.num_kv_heads * c.head_dim));
    attn_.resize(N * size_t(c.num_heads * c.head_dim));
    out_.resize(N * size_t(c.d_model));
    ff_.resize(N * size_t(c.ffn_dim));
    cos_.resize(N * size_t(c.head_dim / 2));
    sin_.resize(N * size_t(c.head_dim / 2));
    capacity_ = n;
}

void TransformerRunner::run(float* x, int64_t n, KVCache& cache, ThreadPool& pool,
                            cpu::Precision precision, bool kv_only_last) {
    if (n <= 0) return;
    reserve(n);
    const TransformerConfig& c = w_.cfg;
    const int64_t D = c.d_model, hd = c.head_dim;
    const int64_t pos0 = cache.n_past();
    // Positions in the rotary table: the package forms angles in float32 from its own
    // positions; double here, as the reference.
    cpu::rope_table(c.rope_max_period, 1.0, hd, pos0, n, cos_.data(), sin_.data());

    cpu::AttentionShape s;
    s.n_head = c.num_heads;
    s.n_head_kv = c.num_kv_heads;
    s.head_dim = hd;
    s.head_dim_v = hd;
    s.scale = float(1.0 / std::sqrt(double(hd)));
    s.window = c.context;

    const int n_layers = int(w_.layers.size());
    for (int il = 0; il < n_layers; ++il) {
        const TransformerLayer& l = w_.layers[size_t(il)];
        const bool kv_only = kv_only_last && il == n_layers - 1;
        layer_norm(x, l.norm1.weight.data(), l.norm1.bias.data(), n, D, c.norm_eps, h_.data());
        if (kv_only) {
            const cpu::MatmulTarget kv[] = {{&l.wk, k_.data()}, {&l.wv, v_.data()}};
            cpu::matmul_shared_input(kv, 2, h_.data(), n, pool, precision);
        } else {
            const cpu::MatmulTarget qkv[] = {{&l.wq, q_.data()}, {&l.wk, k_.data()},
                                             {&l.wv, v_.data()}};
            cpu::matmul_shared_input(qkv, 3, h_.data(), n, pool, precision);
            cpu::rope(q_.data(), n, c.num_heads, hd, hd, false, cos_.data(), sin_.data());
        }
        cpu::rope(k_.data(), n, c.num_kv_heads, hd, hd, false, cos_.data(), sin_.data());
        cache.kv_cache_append_rows(il, pos0, n, k_.data(), v_.data());
        if (kv_only) break;

        const KVCache::LayerView view = cache.layer(il);
        cpu::attention(s, q_.data(), n, pos0, view, attn_.data(), pool, scratch_);
        cpu::matmul(l.wo, attn_.data(), n, out_.data(), pool, precision);
        if (!l.attn_scale.empty())
            for (int64_t t = 0; t < n; ++t)
                for (int64_t i = 0; i < D; ++i) out_[size_t(t * D + i)] *= l.attn_scale[size_t(i)];
        cpu::add(x, out_.data(), n * D);

        layer_norm(x, l.norm2.weight.data(), l.norm2.bias.data(), n, D, c.norm_eps, h_.data());
        cpu::matmul(l.up, h_.data(), n, ff_.data(), pool, precision);
        gelu_tanh_inplace(ff_.data(), n * c.ffn_dim);
        cpu::matmul(l.down, ff_.data(), n, out_.data(), pool, precision);
        if (!l.ffn_scale.empty())
            for (int64_t t = 0; t < n; ++t)
                for (int64_t i = 0; i < D; ++i) out_[size_t(t * D + i)] *= l.ffn_scale[size_t(i)];
        cpu::add(x, out_.data(), n * D);
    }
}

}  // namespace dasllama::pocket
