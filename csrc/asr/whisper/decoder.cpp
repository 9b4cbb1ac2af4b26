#include "asr/whisper/decoder.h"

#include <cmath>
#include <string>

#include "asr/whisper/blocks.h"
#include "core/errors.h"
#include "nn/activations.h"
#include "nn/layer_norm.h"

namespace dasllama::whisper {


Decoder::Decoder(WhisperWeights& w, int n_threads)
    : w_(w),
      scratch_(n_threads, w.cfg.n_text_state / w.cfg.n_text_head,
               w.cfg.n_text_state / w.cfg.n_text_head) {
    cross_.resize(size_t(w.cfg.n_text_layer));
    caches_.push_back(make_cache());
}

std::unique_ptr<KVCache> Decoder::make_cache() const {
    const WhisperConfig& c = w_.cfg;
    const int64_t hd = c.n_text_state / c.n_text_head;
    return std::make_unique<KVCache>(c.n_text_layer, c.n_text_ctx, c.n_text_head, hd, hd,
                                     KVType::F32);
}

void Decoder::reorder(const std::vector<int>& origin) {
    const int n_old = n_slots();
    for (int o : origin)
        if (o < 0 || o >= n_old)
            throw ShapeError("whisper decoder: reorder from slot " + std::to_string(o));
    // The first slot taken from an old slot moves its cache over (no copy); only the further
    // slots that continue the same old slot copy its rows. The caches nobody took are kept
    // as spares for those copies and later steps.
    std::vector<std::unique_ptr<KVCache>> next(origin.size());
    std::vector<int> moved_to(size_t(n_old), -1);
    for (size_t k = 0; k < origin.size(); ++k) {
        const int o = origin[k];
        if (moved_to[size_t(o)] < 0) {
            moved_to[size_t(o)] = int(k);
            next[k] = std::move(caches_[size_t(o)]);
        }
    }
    for (auto& c : caches_)
        if (c) spare_.push_back(std::move(c));
    const int64_t d = w_.cfg.n_text_state;
    for (size_t k = 0; k < origin.size(); ++k) {
        if (next[k]) continue;
        const KVCache& src = *next[size_t(moved_to[size_t(origin[k])])];
        if (spare_.empty()) spare_.push_back(make_cache());
        next[k] = std::move(spare_.back());
        spare_.pop_back();
        KVCache& dst = *next[k];
        const int64_t n = src.n_past();
        dst.truncate(0);
        copy_k_.resize(size_t(n * d));
        copy_v_.resize(size_t(n * d));
        for (int64_t layer = 0; layer < src.n_layer() && n > 0; ++layer) {
            src.read_layer_rows(int(layer), 0, n, copy_k_.data(), copy_v_.data());
            dst.kv_cache_append_rows(int(layer), 0, n, copy_k_.data(), copy_v_.data());
        }
    }
    caches_ = std::move(next);
}

void Decoder::set_audio(const float* enc, ThreadPool& pool) {
    const WhisperConfig& c = w_.cfg;
    const int64_t n = c.n_audio_ctx, d = c.n_text_state;
    kv_rows_.resize(size_t(n * 2 * d));
    for (int64_t i = 0; i < c.n_text_layer; ++i) {
        frames_linear(w_.dec[size_t(i)].cross_kv, enc, n, kv_rows_.data(), w_.precision, pool);
        cross_[size_t(i)].assign(kv_rows_.data(), kv_rows_.data() + d, 2 * d, n, c.n_text_head,
                                 d / c.n_text_head);
    }
    has_audio_ = true;
    reset();
}

void Decoder::reset(int n_slots) {
    n_slots = std::max(n_slots, 1);
    while (int(caches_.size()) < n_slots) {
        if (spare_.empty()) spare_.push_back(make_cache());
        caches_.push_back(std::move(spare_.back()));
        spare_.pop_back();
    }
    while (int(caches_.size()) > n_slots) {
        spare_.push_back(std::move(caches_.back()));
        caches_.pop_back();
    }
    for (auto& c : caches_) c->truncate(0);
}

const float* Decoder::forward(const int32_t* tokens, int64_t n, ThreadPool& pool, int slot) {
    if (slot < 0 || slot >= n_slots())
        throw ShapeError("whisper decoder: slot " + std::to_string(slot) + " of " +
                         std::to_string(n_slots()));
    return run(tokens, n, pool, slot);
}

const float* Decoder::forward_slots(const int32_t* tokens, ThreadPool& pool) {
    return run(tokens, n_slots(), pool, -1);
}

const float* Decoder::run(const int32_t* tokens, int64_t n, ThreadPool& pool, int slot) {
    const WhisperConfig& c = w_.cfg;
    const int64_t d = c.n_text_state, hd = d / c.n_text_head;
    // Row t sits in slot row_slot[t] at position row_pos[t]: n consecutive positions of one
    // slot, or (slot < 0) one row per slot at that slot's next position.
    row_slot_.assign(size_t(n), slot);
    row_pos_.resize(size_t(n));
    for (int64_t t = 0; t < n; ++t) {
        if (slot < 0) row_slot_[size_t(t)] = int(t);
        row_pos_[size_t(t)] = caches_[size_t(row_slot_[size_t(t)])]->n_past() + (slot < 0 ? 0 : t);
    }
    if (!has_audio_) throw Error("whisper decoder: no encoder output set (set_audio first)");
    if (n <= 0) throw ShapeError("whisper decoder: no tokens to run");
    for (int64_t t = 0; t < n; ++t)
        if (row_pos_[size_t(t)] >= c.n_text_ctx)
            throw ShapeError("whisper decoder: " + std::to_string(n) + " tokens at position " +
                             std::to_string(row_pos_[0]) + " pass the text context of " +
                             std::to_string(c.n_text_ctx));
    for (int64_t t = 0; t < n; ++t)
        if (tokens[t] < 0 || tokens[t] >= c.n_vocab)
            throw ShapeError("whisper decoder: token id " + std::to_string(tokens[t]) +
                             " is outside the vocabulary of " + std::to_string(c.n_vocab));
    x_.resize(size_t(n * d));
    h_.resize(size_t(n * d));
    qkv_.resize(size_t(n * 3 * d));
    q_.resize(size_t(n * d));
    k_.resize(size_t(n * d));
    v_.resize(size_t(n * d));
    attn_.resize(size_t(n * d));
    proj_.resize(size_t(n * d));
    ff_.resize(size_t(n * 4 * d));
    for (int64_t t = 0; t < n; ++t) {
        if (w_.tok_emb_s8)
            nn::s8_dequantize_row(*w_.tok_emb_s8, tokens[t], x_.data() + t * d);
        else
            cpu::get_row(w_.tok_emb, tokens[t], x_.data() + t * d);
        cpu::add(x_.data() + t * d, w_.dec_pos.data() + row_pos_[size_t(t)] * d, d);
    }
    cpu::AttentionShape shape;
    shape.n_head = shape.n_head_kv = c.n_text_head;
    shape.head_dim = shape.head_dim_v = hd;
    shape.scale = float(1.0 / std::sqrt(double(hd)));
    float* x = x_.data();
    for (int64_t i = 0; i < c.n_text_layer; ++i) {
        const DecoderLayer& l = w_.dec[size_t(i)];
        // causal self-attention over the cache
        nn::layer_norm(x, l.attn_ln.w.data(), l.attn_ln.b.data(), n, d, kLayerNormEps, h_.data());
        nn::linear(l.qkv, h_.data(), n, qkv_.data(), pool, w_.precision);
        for (int64_t t = 0; t < n; ++t) {
            const float* r = qkv_.data() + t * 3 * d;
            std::copy(r, r + d, q_.data() + t * d);
            std::copy(r + d, r + 2 * d, k_.data() + t * d);
            std::copy(r + 2 * d, r + 3 * d, v_.data() + t * d);
        }
        if (slot >= 0) {
            KVCache& cache = *caches_[size_t(slot)];
            cache.kv_cache_append_rows(int(i), row_pos_[0], n, k_.data(), v_.data());
            cpu::attention(shape, q_.data(), n, row_pos_[0], cache.layer(int(i)), attn_.data(),
                           pool, scratch_);
        } else {   // one row per slot: one pool job over every slot's attention
            views_.clear();
            jobs_.clear();
            for (int64_t t = 0; t < n; ++t) {
                KVCache& cache = *caches_[size_t(t)];
                cache.kv_cache_append_rows(int(i), row_pos_[size_t(t)], 1, k_.data() + t * d,
                                           v_.data() + t * d);
                views_.push_back(cache.layer(int(i)));
            }
            for (int64_t t = 0; t < n; ++t)
                jobs_.push_back({q_.data() + t * d, 1, row_pos_[size_t(t)], &views_[size_t(t)],
                                 attn_.data() + t * d});
            cpu::attention_batch(shape, jobs_.data(), int(n), pool, scratch_);
        }
        nn::linear(l.out, attn_.data(), n, proj_.data(), pool, w_.precision);
        cpu::add(x, proj_.data(), n * d);
        // cross-attention to the window
        nn::layer_norm(x, l.cross_ln.w.data(), l.cross_ln.b.data(), n, d, kLayerNormEps, h_.data());
        nn::linear(l.cross_q, h_.data(), n, q_.data(), pool, w_.precision);
        if (keep_queries_) {
            kept_q_.resize(size_t(c.n_text_layer));
            kept_q_[size_t(i)].assign(q_.data(), q_.data() + n * d);
        }
        nn::attend_all(cross_[size_t(i)], q_.data(), d, n, shape.scale, attn_.data(), d, pool,
                       cross_scratch_);
        nn::linear(l.cross_out, attn_.data(), n, proj_.data(), pool, w_.precision);
        cpu::add(x, proj_.data(), n * d);
        // MLP
        residual_mlp(l.mlp_ln, l.fc1, l.fc2, x, n, d, w_.precision, pool, h_.data(), ff_.data(),
                     proj_.data());
    }
    nn::layer_norm(x, w_.dec_ln.w.data(), w_.dec_ln.b.data(), n, d, kLayerNormEps, x);
    return x;
}

void Decoder::logits(const float* h, int64_t n, float* out, ThreadPool& pool) const {
    if (w_.proj_s8) {   // the int8 lane: no bias, as the tied projection has none
        thread_local nn::S8Scratch scratch;
        nn::linear_s8(*w_.proj_s8, nullptr, h, n, out, pool, scratch);
        return;
    }
    cpu::matmul(w_.proj, h, n, out, pool, w_.precision);
}

}  // namespace dasllama::whisper
