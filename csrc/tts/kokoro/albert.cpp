#include "tts/kokoro/albert.h"

#include <cmath>

#include "core/thread_pool.h"
#include "tts/kokoro/onnx_math.h"

namespace dasllama::kokoro {

namespace {

const char* const kLayer = "bert.encoder.albert_layer_groups.0.albert_layers.0";

std::string part_of_layer(const char* part) { return std::string(kLayer) + "." + part; }

}  // namespace

Albert Albert::load(const KokoroWeights& w) {
    Albert a;
    a.layers_ = w.config().bert_layers;
    a.heads_ = w.config().bert_heads;
    a.word_ = QEmbedding::load(w, "bert.embeddings.word_embeddings");
    a.type_ = QEmbedding::load(w, "bert.embeddings.token_type_embeddings");
    a.pos_ = QEmbedding::load(w, "bert.embeddings.position_embeddings");
    const int64_t e = a.word_.dim();
    if (a.type_.dim() != e || a.pos_.dim() != e)
        throw ShapeError(w.path() + ": ALBERT's embedding tables differ in width");
    a.emb_ln_w_ = w.f32("bert.embeddings.LayerNorm.weight", {e}).f32();
    a.emb_ln_b_ = w.f32("bert.embeddings.LayerNorm.bias", {e}).f32();
    a.emb_eps_ = w.eps("bert.embeddings.LayerNorm");
    a.mapping_ = QLinear::load(w, "bert.encoder.embedding_hidden_mapping_in");
    const int64_t h = a.mapping_.out();
    if (a.mapping_.in() != e || h % a.heads_)
        throw ShapeError(w.path() + ": ALBERT's hidden width " + std::to_string(h) +
                         " does not fit its embeddings or " + std::to_string(a.heads_) + " heads");
    a.q_ = QLinear::load(w, part_of_layer("attention.query"));
    a.k_ = QLinear::load(w, part_of_layer("attention.key"));
    a.v_ = QLinear::load(w, part_of_layer("attention.value"));
    a.dense_ = QLinear::load(w, part_of_layer("attention.dense"));
    a.ffn_ = QLinear::load(w, part_of_layer("ffn"), /*with_bias=*/false);   // the bias is FastGelu's
    a.ffn_bias_ = w.f32(part_of_layer("ffn.bias"), {a.ffn_.out()}).f32();
    a.ffn_out_ = QLinear::load(w, part_of_layer("ffn_output"));
    a.attn_ln_w_ = w.f32(part_of_layer("attention.LayerNorm.weight"), {h}).f32();
    a.attn_ln_b_ = w.f32(part_of_layer("attention.LayerNorm.bias"), {h}).f32();
    a.attn_eps_ = w.eps(part_of_layer("attention.LayerNorm"));
    a.full_ln_w_ = w.f32(part_of_layer("full_layer_layer_norm.weight"), {h}).f32();
    a.full_ln_b_ = w.f32(part_of_layer("full_layer_layer_norm.bias"), {h}).f32();
    a.full_eps_ = w.eps(part_of_layer("full_layer_layer_norm"));
    a.project_ = QLinear::load(w, "bert_encoder");
    for (const QLinear* l : {&a.q_, &a.k_, &a.v_, &a.dense_, &a.project_})
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
    std::vector<float> q(size_t(t * n)), k(size_t(t * n)), v(size_t(t * n));
    q_.forward(h, t, q.data(), pool);
    k_.forward(h, t, k.data(), pool);
    v_.forward(h, t, v.data(), pool);
    for (size_t i = 0; i < q.size(); ++i) {
        q[i] = q[i] * qk_scale;
        k[i] = k[i] * qk_scale;
    }
    std::vector<float> ctx(size_t(t * n));
    auto head_work = [&](int share, int shares) {
        std::vector<float> p(size_t(t * t));
        for (int64_t hd = heads * share / shares; hd < heads * (share + 1) / shares; ++hd) {
            const int64_t off = hd * dim;
            for (int64_t i = 0; i < t; ++i)
                for (int64_t j = 0; j < t; ++j) {
                    double s = 0.0;
                    for (int64_t c = 0; c < dim; ++c)
                        s += double(q[size_t(i * n + off + c)]) * double(k[size_t(j * n + off + c)]);
                    p[size_t(i * t + j)] = static_cast<float>(s);
                }
            softmax_rows(p.data(), t, t);
            for (int64_t i = 0; i < t; ++i)
                for (int64_t c = 0; c < dim; ++c) {
                    double s = 0.0;
                    for (int64_t j = 0; j < t; ++j)
                        s += double(p[size_t(i * t + j)]) * double(v[size_t(j * n + off + c)]);
                    ctx[size_t(i * n + off + c)] = static_cast<float>(s);
                }
        }
    };
    if (pool && pool->size() > 1)
        pool->run(head_work);
    else
        head_work(0, 1);
    std::vector<float> a(size_t(t * n));
    dense_.forward(ctx.data(), t, a.data(), pool);
    for (size_t i = 0; i < a.size(); ++i) a[i] = h[i] + a[i];
    layer_norm_lanes(a.data(), attn_ln_w_, attn_ln_b_, t, n, attn_eps_, a.data());
    const int64_t f = ffn_.out();
    std::vector<float> g(size_t(t * f));
    ffn_.forward(a.data(), t, g.data(), pool);
    fast_gelu(g.data(), ffn_bias_, t, f, g.data());
    std::vector<float> o(size_t(t * n));
    ffn_out_.forward(g.data(), t, o.data(), pool);
    for (size_t i = 0; i < o.size(); ++i) o[i] = o[i] + a[i];
    layer_norm_lanes(o.data(), full_ln_w_, full_ln_b_, t, n, full_eps_, o.data());
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
