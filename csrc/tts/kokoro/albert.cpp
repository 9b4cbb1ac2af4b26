#include "tts/kokoro/albert.h"
#include "tts/kokoro/no_contract.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/formats.h"
#include "core/thread_pool.h"
#include "cpu/matmul.h"
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/parallel.h"

namespace dasllama::kokoro {

namespace {

const char* const kLayer = "bert.encoder.albert_layer_groups.0.albert_layers.0";

std::string part_of_layer(const char* part) { return std::string(kLayer) + "." + part; }

// The pool for callers that pass none (the core's matmul takes one by reference).
ThreadPool& serial_pool() {
    static ThreadPool one(1);
    return one;
}

// The query, key and value linears side by side: [K, 3N] weights and the three biases; in the
// int8 lane per-column zero points and scales (a per-tensor value repeated).
Linear fused_qkv(const KokoroWeights& w, int64_t hidden) {
    const char* parts[3] = {"attention.query", "attention.key", "attention.value"};
    const int64_t n3 = 3 * hidden;
    const std::string name = w.path() + ": " + part_of_layer("attention.{query,key,value}");
    std::vector<float> bias(static_cast<size_t>(n3));
    for (int p = 0; p < 3; ++p) {
        const float* b = w.f32(part_of_layer(parts[p]) + ".bias", {hidden}).f32();
        std::copy(b, b + hidden, &bias[size_t(p * hidden)]);
    }
    if (lane_of(w, part_of_layer(parts[0]) + ".weight") == Lane::kFloat) {
        std::vector<float> wc(size_t(hidden * n3));
        for (int p = 0; p < 3; ++p) {
            const TensorView wt =
                w.f32(part_of_layer(parts[p]) + ".weight", {hidden, hidden});
            for (int64_t r = 0; r < hidden; ++r)
                std::copy(wt.f32() + r * hidden, wt.f32() + (r + 1) * hidden,
                          &wc[size_t(r * n3 + p * hidden)]);
        }
        return Linear::from_floats(wc.data(), hidden, n3, bias.data(), name);
    }
    std::vector<int8_t> wc(size_t(hidden * n3));
    std::vector<float> zp(static_cast<size_t>(n3)), sc(static_cast<size_t>(n3));
    for (int p = 0; p < 3; ++p) {
        const std::string m = part_of_layer(parts[p]);
        const TensorView wt = w.i8(m + ".weight", {hidden, hidden});
        const TensorView z = w.f32(m + ".weight_zp", {-1});
        const TensorView s = w.f32(m + ".weight_scale", {z.dim(0)});
        if (z.dim(0) != 1 && z.dim(0) != hidden)
            throw ShapeError(w.path() + ": " + m + " has " + std::to_string(z.dim(0)) +
                             " zero points for " + std::to_string(hidden) + " outputs");
        for (int64_t r = 0; r < hidden; ++r)
            std::copy(wt.i8() + r * hidden, wt.i8() + (r + 1) * hidden,
                      &wc[size_t(r * n3 + p * hidden)]);
        for (int64_t c = 0; c < hidden; ++c) {
            const int64_t j = z.dim(0) == 1 ? 0 : c;
            zp[size_t(p * hidden + c)] = z.f32()[j];
            sc[size_t(p * hidden + c)] = s.f32()[j];
        }
    }
    return Linear::from_int8(
        QLinear(wc.data(), hidden, n3, zp.data(), sc.data(), n3, bias.data(), name));
}

}  // namespace

Albert Albert::load(const KokoroWeights& w) {
    Albert a;
    a.layers_ = w.config().bert_layers;
    a.heads_ = w.config().bert_heads;
    a.gelu_erf_ = w.config().bert_gelu_erf;
    a.word_ = Embedding::load(w, "bert.embeddings.word_embeddings");
    a.type_ = Embedding::load(w, "bert.embeddings.token_type_embeddings");
    a.pos_ = Embedding::load(w, "bert.embeddings.position_embeddings");
    const int64_t e = a.word_.dim();
    if (a.type_.dim() != e || a.pos_.dim() != e)
        throw ShapeError(w.path() + ": ALBERT's embedding tables differ in width");
    a.emb_ln_w_ = w.f32("bert.embeddings.LayerNorm.weight", {e}).f32();
    a.emb_ln_b_ = w.f32("bert.embeddings.LayerNorm.bias", {e}).f32();
    a.emb_eps_ = w.eps("bert.embeddings.LayerNorm");
    a.mapping_ = Linear::load(w, "bert.encoder.embedding_hidden_mapping_in");
    const int64_t h = a.mapping_.out();
    if (a.mapping_.in() != e || h % a.heads_)
        throw ShapeError(w.path() + ": ALBERT's hidden width " + std::to_string(h) +
                         " does not fit its embeddings or " + std::to_string(a.heads_) + " heads");
    a.qkv_ = fused_qkv(w, h);
    a.dense_ = Linear::load(w, part_of_layer("attention.dense"));
    a.ffn_ = Linear::load(w, part_of_layer("ffn"), /*with_bias=*/false);   // the bias is FastGelu's
    a.ffn_bias_ = w.f32(part_of_layer("ffn.bias"), {a.ffn_.out()}).f32();
    a.ffn_out_ = Linear::load(w, part_of_layer("ffn_output"));
    a.attn_ln_w_ = w.f32(part_of_layer("attention.LayerNorm.weight"), {h}).f32();
    a.attn_ln_b_ = w.f32(part_of_layer("attention.LayerNorm.bias"), {h}).f32();
    a.attn_eps_ = w.eps(part_of_layer("attention.LayerNorm"));
    a.full_ln_w_ = w.f32(part_of_layer("full_layer_layer_norm.weight"), {h}).f32();
    a.full_ln_b_ = w.f32(part_of_layer("full_layer_layer_norm.bias"), {h}).f32();
    a.full_eps_ = w.eps(part_of_layer("full_layer_layer_norm"));
    a.project_ = Linear::load(w, "bert_encoder");
    for (const Linear* l : {&a.qkv_, &a.dense_, &a.project_})
        if (l->in() != h) throw ShapeError(l->name() + ": input width is not " + std::to_string(h));
    if (a.ffn_.in() != h || a.ffn_out_.in() != a.ffn_.out() || a.ffn_out_.out() != h)
        throw ShapeError(w.path() + ": ALBERT's feed-forward widths do not chain");
    return a;
}

std::vector<float> Albert::embed(const int64_t* ids, int64_t t, ThreadPool* pool) const {
    if (t < 1 || t > pos_.rows())
        throw ShapeError("ALBERT: " + std::to_string(t) + " ids; at most " +
                         std::to_string(pos_.rows()) + " (the position table), at least 1");
    const int64_t e = word_.dim();
    std::vector<float> x(size_t(t * e)), y(size_t(t * e));
    std::vector<int64_t> aux(size_t(t), 0);   // token types: all 0
    word_.lookup(ids, t, x.data());
    type_.lookup(aux.data(), t, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + y[i];
    for (int64_t i = 0; i < t; ++i) aux[size_t(i)] = i;
    pos_.lookup(aux.data(), t, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + y[i];
    layer_norm_lanes(x.data(), emb_ln_w_, emb_ln_b_, t, e, emb_eps_, x.data());
    std::vector<float> h(size_t(t * hidden()));
    mapping_.forward(x.data(), t, h.data(), pool);
    return h;
}

std::vector<float> Albert::layer(const float* h, int64_t t, ThreadPool* pool) const {
    const int64_t n = hidden(), heads = heads_, dim = n / heads;
    const float qk_scale = std::sqrt(1.0f / std::sqrt(static_cast<float>(dim)));
    std::vector<float> qkv(size_t(t * 3 * n));
    qkv_.forward(h, t, qkv.data(), pool);
    // Attention in float32 through the core's float matmul, heads spread over the pool and each
    // head's products on its thread: scores = q_h k_h^T with k_h's rows as the weight rows,
    // ctx_h = p v_h with v_h^T's rows. A head's products are small (115 ids make 1.7 MFLOP a
    // product), so one hand-off for all heads replaces three a head. Per head the arithmetic is
    // the serial path's, so the split does not change a bit (checked at 1 and 2 threads).
    std::vector<float> ctx(size_t(t * n));
    const TypeTraits& f32 = *type_traits(static_cast<uint32_t>(GgmlType::F32));
    auto attend = [&](int64_t h0, int64_t h1) {
        std::vector<float> qh(size_t(t * dim)), kh(size_t(t * dim)), vt(size_t(dim * t));
        std::vector<float> p(size_t(t * t)), ch(size_t(t * dim));
        for (int64_t hd = h0; hd < h1; ++hd) {
            const int64_t off = hd * dim;
            for (int64_t j = 0; j < t; ++j) {
                const float* row = &qkv[size_t(j * 3 * n)];
                for (int64_t c = 0; c < dim; ++c) {
                    qh[size_t(j * dim + c)] = row[off + c] * qk_scale;
                    kh[size_t(j * dim + c)] = row[n + off + c] * qk_scale;
                    vt[size_t(c * t + j)] = row[2 * n + off + c];
                }
            }
            const cpu::WeightMatrix wk = cpu::prepare_weight(
                f32, t, dim, reinterpret_cast<const uint8_t*>(kh.data()), nullptr);
            cpu::matmul(wk, qh.data(), t, p.data(), serial_pool(), cpu::Precision::kF32);
            softmax_rows(p.data(), t, t);
            const cpu::WeightMatrix wv = cpu::prepare_weight(
                f32, dim, t, reinterpret_cast<const uint8_t*>(vt.data()), nullptr);
            cpu::matmul(wv, p.data(), t, ch.data(), serial_pool(), cpu::Precision::kF32);
            for (int64_t i = 0; i < t; ++i)
                std::copy(&ch[size_t(i * dim)], &ch[size_t((i + 1) * dim)],
                          &ctx[size_t(i * n + off)]);
        }
    };
    const int threads = pool ? pool->size() : 1;
    if (threads <= 1) {
        attend(0, heads);
    } else {
        pool->run([&](int th, int nt) {
            const int64_t h0 = heads * th / nt, h1 = heads * (th + 1) / nt;
            if (h0 < h1) attend(h0, h1);
        });
    }
    std::vector<float> a(size_t(t * n));
    dense_.forward(ctx.data(), t, a.data(), pool);
    parallel_rows(pool, t, n, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * n; i < r1 * n; ++i) a[size_t(i)] = h[i] + a[size_t(i)];
        layer_norm_lanes(&a[size_t(r0 * n)], attn_ln_w_, attn_ln_b_, r1 - r0, n, attn_eps_,
                         &a[size_t(r0 * n)]);
    });
    const int64_t f = ffn_.out();
    std::vector<float> g(size_t(t * f));
    ffn_.forward(a.data(), t, g.data(), pool);
    parallel_rows(pool, t, f, [&](int64_t r0, int64_t r1) {
        if (gelu_erf_)
            gelu_erf(&g[size_t(r0 * f)], ffn_bias_, r1 - r0, f, &g[size_t(r0 * f)]);
        else
            fast_gelu(&g[size_t(r0 * f)], ffn_bias_, r1 - r0, f, &g[size_t(r0 * f)]);
    });
    std::vector<float> o(size_t(t * n));
    ffn_out_.forward(g.data(), t, o.data(), pool);
    parallel_rows(pool, t, n, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * n; i < r1 * n; ++i) o[size_t(i)] = o[size_t(i)] + a[size_t(i)];
        layer_norm_lanes(&o[size_t(r0 * n)], full_ln_w_, full_ln_b_, r1 - r0, n, full_eps_,
                         &o[size_t(r0 * n)]);
    });
    return o;
}

std::vector<float> Albert::project(const float* h, int64_t t, ThreadPool* pool) const {
    std::vector<float> out(size_t(t * project_.out()));
    project_.forward(h, t, out.data(), pool);
    return out;
}

std::vector<float> Albert::forward(const int64_t* ids, int64_t t, ThreadPool* pool,
                                   int64_t layers) const {
    std::vector<float> h = embed(ids, t, pool);
    const int64_t n = layers < 0 ? layers_ : layers;
    for (int64_t i = 0; i < n; ++i) h = layer(h.data(), t, pool);
    return project(h.data(), t, pool);
}

}  // namespace dasllama::kokoro
