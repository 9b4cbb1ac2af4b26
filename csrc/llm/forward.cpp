// The forward pass of llama, qwen2, qwen3, qwen3moe and gemma3 (llama.cpp src/models/*.cpp
// for the definitions). One pre-norm block per layer:
//
//   h = x + [post_attn_norm] attn(rmsnorm(x, attn_norm))
//   x = h + [post_ffn_norm]  ffn(rmsnorm(h, ffn_norm))
//
// attn: q, k, v projections (+ bias: qwen2), per-head RMSNorm of q and k (qwen3, qwen3moe,
// gemma3), rope (NORM for llama, NEOX for the others), causal GQA softmax attention (over the
// last `sliding_window` positions on gemma3's local layers), output projection.
// ffn: down(act(gate(x)) * up(x)) with silu, or tanh-gelu (gemma3); qwen3moe routes each token
// to its top-k experts by softmax probability, weights renormalized over the chosen k.
// Logits: rmsnorm(x, output_norm) times output (or the token embedding when tied).
#include "llm/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "llm/kv_cache.h"

namespace dasllama {

namespace {

// Rows of a dense feed-forward computed at once. Its gate and up activations (2 x n_ff floats a
// row) are the widest scratch; a chunk runs through them in slices of this many rows, so they
// need not be sized for max_batch rows. 128 rows keep the products at full width, and each
// row's result depends on that row alone (cpu/matmul.h), so slicing changes no value.
constexpr int64_t kFfnRows = 128;

// Row-wise passes (norms, residual adds, gated activations) of at least this many values are
// spread over the pool: a prompt chunk's ran on one thread while the others waited (a tenth
// of a 2-thread prefill), and an 8-row decode step's activations cost more than a pool round.
// Each row's values depend on that row alone, so the split changes none of them.
constexpr int64_t kPoolValues = 4096;

template <class Body>
void for_rows(ThreadPool& pool, int64_t n_rows, int64_t row_values, const Body& body) {
    if (n_rows < 2 || pool.size() == 1 || n_rows * row_values < kPoolValues) {
        body(int64_t(0), n_rows);
        return;
    }
    pool.run([&](int share, int n_shares) {
        const int64_t r0 = n_rows * share / n_shares, r1 = n_rows * (share + 1) / n_shares;
        if (r0 < r1) body(r0, r1);
    });
}

}  // namespace

Forward::Forward(const ModelConfig& cfg, const ModelWeights& w, int64_t max_batch, int n_threads)
    : cfg_(cfg), w_(w), max_batch_(std::max<int64_t>(1, max_batch)),
      attn_scratch_(n_threads, cfg.head_dim, cfg.head_dim_v) {
    const size_t B = size_t(max_batch_);
    const int64_t ff = cfg.moe ? cfg.n_ff_exp : cfg.n_ff;
    // An expert may take every row of a chunk: MoE keeps full-height buffers.
    ffn_rows_ = cfg.moe ? max_batch_ : std::min(max_batch_, kFfnRows);
    x_.resize(B * size_t(cfg.n_embd));
    xn_.resize(B * size_t(cfg.n_embd));
    q_.resize(B * size_t(cfg.q_dim()));
    k_.resize(B * size_t(cfg.k_dim()));
    v_.resize(B * size_t(cfg.v_dim()));
    attn_.resize(B * size_t(cfg.n_head * cfg.head_dim_v));
    out_.resize(B * size_t(cfg.n_embd));
    gate_.resize(size_t(ffn_rows_) * size_t(ff));
    up_.resize(size_t(ffn_rows_) * size_t(ff));
    for (const LayerConfig& lc : cfg.layers) {
        bool seen = false;
        for (const RopeTable& r : ropes_) seen |= r.base == lc.rope_base && r.scale == lc.rope_scale;
        if (!seen) {
            const size_t n = B * size_t(cfg.n_rot / 2);
            ropes_.push_back({lc.rope_base, lc.rope_scale, std::vector<float>(n), std::vector<float>(n)});
        }
    }
    if (cfg.moe) {
        router_.resize(B * size_t(cfg.n_expert));
        expert_tokens_.resize(size_t(cfg.n_expert) * B);
        expert_weights_.resize(size_t(cfg.n_expert) * B);
        expert_count_.resize(size_t(cfg.n_expert));
        gathered_.resize(B * size_t(cfg.n_embd));
        expert_out_.resize(B * size_t(cfg.n_embd));
    }
}

int64_t Forward::scratch_bytes() const {
    auto f = [](const auto& v) { return int64_t(v.capacity() * sizeof(v[0])); };
    int64_t n = f(x_) + f(xn_) + f(q_) + f(k_) + f(v_) + f(attn_) + f(out_) + f(gate_) + f(up_) +
                f(router_) + f(expert_tokens_) + f(expert_weights_) + f(expert_count_) +
                f(gathered_) + f(expert_out_);
    for (const RopeTable& r : ropes_) n += f(r.cos) + f(r.sin);
    return n;
}

const Forward::RopeTable& Forward::rope_for(const LayerConfig& lc) const {
    for (const RopeTable& r : ropes_)
        if (r.base == lc.rope_base && r.scale == lc.rope_scale) return r;
    throw Error("forward: no rope table for base " + std::to_string(lc.rope_base));
}

void Forward::run(const int32_t* ids, int64_t n, KVCache& cache, ThreadPool& pool,
                  cpu::Precision precision, bool all_logits, float* logits,
                  const std::function<void()>& between_layers) {
    precision_ = precision;
    std::vector<int64_t> out_rows;
    for (int64_t start = 0; start < n; start += max_batch_) {
        const int64_t len = std::min(max_batch_, n - start);
        const bool last_chunk = start + len == n;
        out_rows.clear();
        for (int64_t r = all_logits ? 0 : (last_chunk ? len - 1 : len); r < len; ++r)
            out_rows.push_back(r);
        const SequenceRows seq{&cache, len, false};
        run_chunk(ids + start, &seq, 1, out_rows, ForwardHead::kLogits,
                  all_logits ? logits + start * cfg_.n_vocab : logits, pool, between_layers);
    }
}

void Forward::run_hidden(const int32_t* ids, int64_t n, KVCache& cache, ThreadPool& pool,
                         cpu::Precision precision, float* hidden) {
    precision_ = precision;
    std::vector<int64_t> out_rows;
    for (int64_t start = 0; start < n; start += max_batch_) {
        const int64_t len = std::min(max_batch_, n - start);
        out_rows.resize(size_t(len));
        std::iota(out_rows.begin(), out_rows.end(), int64_t(0));
        const SequenceRows seq{&cache, len, false};
        run_chunk(ids + start, &seq, 1, out_rows, ForwardHead::kHidden,
                  hidden + start * cfg_.n_embd, pool, {});
    }
}

void Forward::run_batch(const int32_t* ids, const SequenceRows* seqs, int n_seqs,
                        ThreadPool& pool, cpu::Precision precision, float* logits) {
    precision_ = precision;
    std::vector<int64_t> out_rows;
    int64_t n = 0;
    for (int i = 0; i < n_seqs; ++i) {
        if (seqs[i].n <= 0 || !seqs[i].cache)
            throw ShapeError("forward: sequence " + std::to_string(i) + " of the batch has no rows");
        n += seqs[i].n;
        if (seqs[i].want_logits) out_rows.push_back(n - 1);
    }
    if (n > max_batch_)
        throw ShapeError("forward: a batch of " + std::to_string(n) + " rows exceeds max_batch " +
                         std::to_string(max_batch_));
    run_chunk(ids, seqs, n_seqs, out_rows, ForwardHead::kLogits, logits, pool, {});
}

void Forward::run_chunk(const int32_t* ids, const SequenceRows* seqs, int n_seqs,
                        const std::vector<int64_t>& out_rows, ForwardHead head, float* out,
                        ThreadPool& pool, const std::function<void()>& between_layers) {
    const int64_t E = cfg_.n_embd;
    float* x = x_.data();
    int64_t n = 0;
    seq_pos0_.resize(size_t(n_seqs));
    for (int i = 0; i < n_seqs; ++i) {
        seq_pos0_[size_t(i)] = seqs[i].cache->n_past();
        n += seqs[i].n;
    }

    // --- embedding ------------------------------------------------------------------------
    for (int64_t t = 0; t < n; ++t) {
        cpu::get_row(w_.token_embd, ids[t], x + t * E);
        if (cfg_.embd_scale != 1.0f)
            for (int64_t i = 0; i < E; ++i) x[t * E + i] *= cfg_.embd_scale;
    }
    const int64_t half = cfg_.n_rot / 2;
    for (RopeTable& r : ropes_)
        for (int i = 0, row = 0; i < n_seqs; row += int(seqs[i].n), ++i)
            cpu::rope_table(r.base, r.scale, cfg_.n_rot, seq_pos0_[size_t(i)], seqs[i].n,
                            r.cos.data() + row * half, r.sin.data() + row * half,
                            w_.rope_freqs.empty() ? nullptr : w_.rope_freqs.data());

    // --- layers ---------------------------------------------------------------------------
    // With one sequence whose wanted rows are its last ones, the last layer computes outputs
    // only for those (none for a prompt chunk before the last); every row still leaves its K/V
    // in the cache. Rows of several sequences all run the last layer whole.
    const int64_t n_out = int64_t(out_rows.size());
    const bool suffix = n_out == 0 || (out_rows.back() == n - 1 && out_rows.front() == n - n_out);
    const int64_t wanted_from = n_seqs == 1 && suffix ? n - n_out : 0;
    for (int il = 0; il < int(cfg_.n_layer); ++il) {
        const LayerWeights& l = w_.layers[size_t(il)];
        const int64_t first = il == cfg_.n_layer - 1 ? wanted_from : 0;
        const int64_t rows = n - first;
        float* xr = x + first * E;
        for_rows(pool, n, E, [&](int64_t r0, int64_t r1) {
            cpu::rmsnorm(x + r0 * E, l.attn_norm.data(), r1 - r0, E, cfg_.rms_eps,
                         xn_.data() + r0 * E);
        });
        attention_layer(il, n, first, seqs, n_seqs, seq_pos0_.data(), pool);
        // Residual and norms of row r touch row r of out_, xr and xn_ alone.
        for_rows(pool, rows, E, [&](int64_t r0, int64_t r1) {
            float* o = out_.data() + r0 * E;
            const int64_t m = r1 - r0;
            if (cfg_.post_norms) cpu::rmsnorm(o, l.post_attn_norm.data(), m, E, cfg_.rms_eps, o);
            cpu::add(xr + r0 * E, o, m * E);
            cpu::rmsnorm(xr + r0 * E, l.ffn_norm.data(), m, E, cfg_.rms_eps, xn_.data() + r0 * E);
        });
        if (cfg_.moe)
            moe_ffn(l, rows, pool);
        else
            dense_ffn(l, rows, pool);
        for_rows(pool, rows, E, [&](int64_t r0, int64_t r1) {
            float* o = out_.data() + r0 * E;
            const int64_t m = r1 - r0;
            if (cfg_.post_norms) cpu::rmsnorm(o, l.post_ffn_norm.data(), m, E, cfg_.rms_eps, o);
            cpu::add(xr + r0 * E, o, m * E);
        });
        if (between_layers) between_layers();
    }

    // --- head -----------------------------------------------------------------------------
    if (n_out == 0 || !out) return;
    for (int64_t j = 0; j < n_out; ++j)
        cpu::rmsnorm(x + out_rows[size_t(j)] * E, w_.output_norm.data(), 1, E, cfg_.rms_eps,
                     xn_.data() + j * E);
    if (head == ForwardHead::kHidden) {
        std::copy_n(xn_.data(), n_out * E, out);
        return;
    }
    mm(w_.output, xn_.data(), n_out, out, pool);
    if (cfg_.final_logit_softcap > 0.0) {
        const float cap = float(cfg_.final_logit_softcap);
        for (int64_t i = 0; i < n_out * cfg_.n_vocab; ++i) out[i] = cap * std::tanh(out[i] / cap);
    }
}

void Forward::attention_layer(int il, int64_t n, int64_t first, const SequenceRows* seqs,
                              int n_seqs, const int64_t* pos0, ThreadPool& pool) {
    const LayerWeights& l = w_.layers[size_t(il)];
    const LayerConfig& lc = cfg_.layers[size_t(il)];
    const int64_t hd = cfg_.head_dim;
    float* q = q_.data();
    float* k = k_.data();
    float* v = v_.data();

    const int64_t nq = n - first;  // query rows: the tokens whose output is needed
    if (nq == n) {
        const cpu::MatmulTarget qkv[] = {{&l.wq, q}, {&l.wk, k}, {&l.wv, v}};
        cpu::matmul_shared_input(qkv, 3, xn_.data(), n, pool, precision_);
    } else {
        mm(l.wq, xn_.data() + first * cfg_.n_embd, nq, q, pool);
        mm(l.wk, xn_.data(), n, k, pool);
        mm(l.wv, xn_.data(), n, v, pool);
    }
    if (cfg_.qkv_bias) {
        cpu::add_rows(q, nullptr, l.bq.data(), nq, cfg_.q_dim());
        cpu::add_rows(k, nullptr, l.bk.data(), n, cfg_.k_dim());
        cpu::add_rows(v, nullptr, l.bv.data(), n, cfg_.v_dim());
    }
    if (cfg_.qk_norm) {
        // Every head of every token is one row of head_dim.
        cpu::rmsnorm(q, l.q_norm.data(), nq * cfg_.n_head, hd, cfg_.rms_eps, q);
        cpu::rmsnorm(k, l.k_norm.data(), n * cfg_.n_head_kv, hd, cfg_.rms_eps, k);
    }
    const RopeTable& rt = rope_for(lc);
    const bool neox = cfg_.rope_layout == RopeLayout::Neox;
    const int64_t half = cfg_.n_rot / 2;
    cpu::rope(q, nq, cfg_.n_head, hd, cfg_.n_rot, neox, rt.cos.data() + first * half,
              rt.sin.data() + first * half);
    cpu::rope(k, n, cfg_.n_head_kv, hd, cfg_.n_rot, neox, rt.cos.data(), rt.sin.data());

    cpu::AttentionShape s;
    s.n_head = cfg_.n_head;
    s.n_head_kv = cfg_.n_head_kv;
    s.head_dim = hd;
    s.head_dim_v = cfg_.head_dim_v;
    s.scale = cfg_.attn_scale;
    s.window = lc.sliding ? cfg_.sliding_window : 0;
    const int64_t attn_dim = cfg_.n_head * cfg_.head_dim_v;
    views_.clear();
    jobs_.clear();
    for (int i = 0, row = 0; i < n_seqs; row += int(seqs[i].n), ++i) {
        KVCache& cache = *seqs[i].cache;
        cache.kv_cache_append_rows(il, pos0[i], seqs[i].n, k + row * cfg_.k_dim(),
                                   v + row * cfg_.v_dim());
        views_.push_back(cache.layer(il));
    }
    for (int i = 0, row = 0; i < n_seqs; row += int(seqs[i].n), ++i) {
        // This sequence's query rows: those of [row, row + n) at or after `first`.
        const int64_t q0 = std::max<int64_t>(row, first), q1 = row + seqs[i].n;
        if (q0 < q1)
            jobs_.push_back({q + (q0 - first) * cfg_.q_dim(), q1 - q0, pos0[i] + (q0 - row),
                             &views_[size_t(i)], attn_.data() + (q0 - first) * attn_dim});
    }
    cpu::attention_batch(s, jobs_.data(), int(jobs_.size()), pool, attn_scratch_);
    mm(l.wo, attn_.data(), nq, out_.data(), pool);
}

void Forward::dense_ffn(const LayerWeights& l, int64_t n, ThreadPool& pool) {
    const int64_t E = cfg_.n_embd;
    const cpu::MatmulTarget gate_up[] = {{&l.ffn_gate, gate_.data()}, {&l.ffn_up, up_.data()}};
    for (int64_t r0 = 0; r0 < n; r0 += ffn_rows_) {
        const int64_t rows = std::min(ffn_rows_, n - r0);
        cpu::matmul_shared_input(gate_up, 2, xn_.data() + r0 * E, rows, pool, precision_);
        const int64_t F = cfg_.n_ff;
        for_rows(pool, rows, F, [&](int64_t s0, int64_t s1) {  // rows of this slice
            if (cfg_.gelu_ffn)
                cpu::geglu_tanh(gate_.data() + s0 * F, up_.data() + s0 * F, (s1 - s0) * F);
            else
                cpu::swiglu(gate_.data() + s0 * F, up_.data() + s0 * F, (s1 - s0) * F);
        });
        mm(l.ffn_down, gate_.data(), rows, out_.data() + r0 * E, pool);
    }
}

void Forward::moe_ffn(const LayerWeights& l, int64_t n, ThreadPool& pool) {
    const int64_t E = cfg_.n_embd, X = cfg_.n_expert, K = cfg_.n_expert_used, F = cfg_.n_ff_exp;
    const size_t B = size_t(max_batch_);
    // Routing: softmax over all experts, keep the k most probable, renormalize their weights.
    // The router stays float32 whatever the precision: a flipped choice of expert is a large
    // change, not a rounding.
    cpu::matmul(l.router, xn_.data(), n, router_.data(), pool, cpu::Precision::kF32);
    std::fill(expert_count_.begin(), expert_count_.end(), 0);
    int64_t order[kMaxExperts];  // n_expert <= kMaxExperts, checked when the config is read
    for (int64_t t = 0; t < n; ++t) {
        float* p = router_.data() + t * X;
        cpu::softmax(p, X);
        std::iota(order, order + X, int64_t(0));
        std::partial_sort(order, order + K, order + X, [p](int64_t a, int64_t b) {
            return p[a] > p[b] || (p[a] == p[b] && a < b);
        });
        float total = 0.0f;
        for (int64_t j = 0; j < K; ++j) total += p[order[j]];
        for (int64_t j = 0; j < K; ++j) {
            const int64_t e = order[j];
            const size_t slot = size_t(e) * B + size_t(expert_count_[size_t(e)]++);
            expert_tokens_[slot] = int32_t(t);
            expert_weights_[slot] = p[e] / total;
        }
    }

    // Each expert runs once, on the rows of the tokens routed to it.
    std::fill(out_.begin(), out_.begin() + n * E, 0.0f);
    for (int64_t e = 0; e < X; ++e) {
        const int64_t cnt = expert_count_[size_t(e)];
        if (cnt == 0) continue;
        const int32_t* toks = expert_tokens_.data() + size_t(e) * B;
        const float* wts = expert_weights_.data() + size_t(e) * B;
        for (int64_t i = 0; i < cnt; ++i)
            std::copy_n(xn_.data() + toks[i] * E, E, gathered_.data() + i * E);
        mm(l.gate_exps[size_t(e)], gathered_.data(), cnt, gate_.data(), pool);
        mm(l.up_exps[size_t(e)], gathered_.data(), cnt, up_.data(), pool);
        for_rows(pool, cnt, F, [&](int64_t r0, int64_t r1) {
            cpu::swiglu(gate_.data() + r0 * F, up_.data() + r0 * F, (r1 - r0) * F);
        });
        mm(l.down_exps[size_t(e)], gate_.data(), cnt, expert_out_.data(), pool);
        for (int64_t i = 0; i < cnt; ++i) {
            float* o = out_.data() + toks[i] * E;
            const float* y = expert_out_.data() + i * E;
            for (int64_t d = 0; d < E; ++d) o[d] += wts[i] * y[d];
        }
    }
}

}  // namespace dasllama
