#include "llm/gpu_forward.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/formats.h"
#include "core/tuning.h"
#include "cpu/matmul.h"
#include "gk_args.h"

namespace dasllama {

namespace {

namespace gk = gpu::gk_args;
// attention_layer() fills one argument block for the portable and the coopmat attention.
static_assert(sizeof(gk::attention) == sizeof(gk::attention_coopmat),
              "attention and attention_coopmat must share one argument layout");

using gpu::require_stamp;
using gpu::stride_groups;

// Threads of the element-wise and table kernels (their GK_WG).
constexpr uint32_t kEltwiseGroup = 256;
constexpr uint32_t kRopeTableGroup = 64;
// Query rows up to which attention_decode (a workgroup per head and row) serves; longer calls
// take the tiled attention_prefill.
constexpr int64_t kAttnDecodeMaxTokens = 8;
// Replaying the last recording is bit-identical to recording the call anew; 0 re-records
// every call (to compare the two, or to time the recording).
const tuning::Knob& kReplay = tuning::define(
    "vulkan.llm.replay", 1, 0, 1, "submit the last command buffer again for a call of its shape");
// Query rows per workgroup of the prefill attention (GK_ATTN_PREFILL of its stamps
// attention_prefill (16), attention_prefill_8, attention_prefill_4): fewer rows make more
// workgroups, which models with few heads need to fill a GPU, but read the keys more often.
// Measured on an H200, pp512: 8 rows ran 5% (SmolLM2, 9 heads) and 2% (Gemma-3, 4 heads)
// faster than 16, and 4 rows between the two.
const tuning::Knob& kAttnPrefillRowsLog2 = tuning::define(
    "vulkan.attention.prefill_rows_log2", 3, 2, 4,
    "log2 of the query rows a prefill attention workgroup holds (3: 8 rows)");

// Whether prompt calls take the cooperative-matrix attention stamps where the device has them.
// Measured on an H200, pp512, a layer's attention: SmolLM2-135M (9 heads of 64) 48 us against
// 60 us on attention_prefill_8, Gemma-3-270M (4 heads of 256) 67 us against 112 us; one
// subgroup a workgroup (no split of the keys) had run at 70 and 146 us.
const tuning::Knob& kAttnPrefillCoopmat = tuning::define(
    "vulkan.attention.prefill_coopmat", 1, 0, 1,
    "1: prompt attention on cooperative matrices where the device has them; 0: portable");
// Whether one-token decode forms the gated FFN activation once before the down projection.
// Measured on an H200, a decode step: SmolLM2-135M 1.53 ms without, 1.39 ms with (its down
// projection 13.8 us, then 7.0 us plus 3.8 us for the pass); Gemma-3-270M 1.80 and 1.66 ms.
const tuning::Knob& kDecodeGluPass = tuning::define(
    "vulkan.llm.decode_glu_pass", 1, 0, 1,
    "1: one-token decode forms the gated activation in its own pass before the down projection");
// Key chunks of each head's decode attention: few heads make few workgroups (Gemma-3-270M: 4),
// each walking every key alone; chunks make more, whose sums attention_merge adds (one more
// dispatch). Measured on an H200, a decode step at tg128 positions: Gemma-3 (4 heads) 1.68 ms
// unsplit, 1.62 / 1.57 / 1.65 ms with 4 / 8 / 16 chunks; SmolLM2 (9 heads) 1.40 ms unsplit,
// 1.47-1.49 ms split. So by default (0) calls of fewer than kAttnSplitBelowGroups workgroups
// (heads x rows) take kAttnAutoSplits chunks; 1 never splits; 2..64 force that many.
constexpr int64_t kMaxAttnSplits = 64;
constexpr int64_t kAttnSplitBelowGroups = 8;
constexpr int64_t kAttnAutoSplits = 8;
// Deep caches split whatever the heads: one workgroup a head walking 4096 keys alone made
// SmolLM2's tg128 after 4096 cached tokens 118 t/s on an H200 (1.42x llama.cpp's at depth 0,
// 0.25x at 4096). From kAttnSplitFromKeys keys a call takes the power of two of chunks that
// holds at most kAttnKeysPerChunk keys each (at most kMaxAttnSplits); a recording keeps its
// count while the cache grows (chunks are cut at run time) and is made again when it changes.
constexpr int64_t kAttnSplitFromKeys = 1024;
constexpr int64_t kAttnKeysPerChunk = 256;
const tuning::Knob& kAttnDecodeSplit = tuning::define(
    "vulkan.attention.decode_split", 0, 0, kMaxAttnSplits,
    "key chunks of each head's decode attention: 0 by workgroups, 1 unsplit, 2..64 forced");
// The keys a granule of the coopmat attention reads at once (GK_ACM_KG).
constexpr int64_t kAttnGranule = 16;

uint32_t u32(int64_t v) { return uint32_t(v); }
uint32_t ceil_div(int64_t a, int64_t b) { return uint32_t((a + b - 1) / b); }

const TypeTraits& f16_traits() {
    static const TypeTraits* t = type_traits("F16");
    return *t;
}

}  // namespace

std::string prefill_attention_coopmat(int64_t n, int64_t head_dim, int64_t head_dim_v,
                                      bool coopmat) {
    if (n <= kAttnDecodeMaxTokens || !coopmat || kAttnPrefillCoopmat.get() == 0) return "";
    if (head_dim != head_dim_v) return "";
    const std::string name = "attention_prefill_cm_" + std::to_string(head_dim);
    const gpu::StampInfo* st = gpu::find_stamp(name);
    return st && st->spirv ? name : "";
}

int64_t decode_attention_splits(int64_t n, int64_t n_head, int64_t n_keys) {
    if (n > kAttnDecodeMaxTokens) return 0;
    const int64_t k = kAttnDecodeSplit.get();
    if (k != 0) return k == 1 ? 0 : k;
    int64_t splits = n * n_head < kAttnSplitBelowGroups ? kAttnAutoSplits : 0;
    if (n_keys >= kAttnSplitFromKeys) {
        int64_t by_keys = 1;
        while (by_keys * kAttnKeysPerChunk < n_keys && by_keys < kMaxAttnSplits) by_keys *= 2;
        splits = std::max(splits, by_keys);
    }
    return splits;
}

bool decode_glu_pass(int64_t n) { return n == 1 && kDecodeGluPass.get() != 0; }

int64_t device_cache_rows(int64_t n_ctx) {
    return (n_ctx + kAttnGranule - 1) / kAttnGranule * kAttnGranule;
}

// The cos/sin table of one (base, scale) pair, for the positions of the current call.
struct GpuForward::RopeTab {
    double base = 0, scale = 0;
    std::unique_ptr<gpu::Buffer> freqs;  // hi/lo float pairs per frequency
    std::unique_ptr<gpu::Buffer> tab;    // [max_batch][half][cos, sin]
};

GpuForward::GpuForward(const ModelConfig& cfg, const ModelWeights& w,
                       std::shared_ptr<gpu::Device> device, int64_t n_ctx, int64_t max_batch)
    : cfg_(cfg), host_w_(w), device_(std::move(device)), n_ctx_(n_ctx),
      max_batch_(std::max<int64_t>(1, max_batch)) {
    gpu::Device& dev = *device_;
    weights_ = upload_weights(dev, cfg, w);
    coopmat_ = dev.info().coopmat_khr;
    dummy_ = dev.alloc(16, "unused binding");

    const size_t B = size_t(max_batch_), F = sizeof(float);
    const int64_t ff = cfg.n_ff;
    x_ = dev.alloc(B * size_t(cfg.n_embd) * F, "x");
    qkv_ = dev.alloc(B * size_t(cfg.q_dim() + cfg.k_dim() + cfg.v_dim()) * F, "qkv");
    attn_ = dev.alloc(B * size_t(cfg.n_head * cfg.head_dim_v) * F, "attn");
    out_ = dev.alloc(B * size_t(cfg.n_embd) * F, "out");
    gate_up_ = dev.alloc(B * size_t(2 * ff) * F, "gate_up");
    // The widest input a projection reads (halves), rounded to whole 16-byte pieces.
    const int64_t widest = std::max({cfg.n_embd, ff, cfg.n_head * cfg.head_dim_v});
    panel_ = dev.alloc((B * size_t(widest) * 2 + 15) / 16 * 16, "staged_panel");
    const int64_t q8_rows = std::min<int64_t>(max_batch_, gpu::kMatvecQ8MaxTokens);
    q8_ = dev.alloc((gpu::q8_bytes(widest, q8_rows) + 15) / 16 * 16, "q8_input");
    attn_parts_ = dev.alloc(size_t(kAttnDecodeMaxTokens * cfg.n_head * kMaxAttnSplits *
                                   (cfg.head_dim_v + 2)) * F, "attention_chunks");
    ids_ = dev.alloc_host(B * sizeof(int32_t), "ids");
    step_ = dev.alloc_host(4 * sizeof(uint32_t), "step");

    // One K and one V buffer per layer, f16: [rows][n_head_kv * head_dim], zero-filled: the
    // coopmat attention reads whole 16-key granules, past the last written row too.
    const size_t cache_rows = size_t(device_cache_rows(n_ctx));
    {
        std::unique_ptr<gpu::Encoder> zero = dev.encoder();
        for (int64_t i = 0; i < cfg.n_layer; ++i) {
            kc_.push_back(dev.alloc(cache_rows * size_t(cfg.k_dim()) * 2, "k_cache"));
            vc_.push_back(dev.alloc(cache_rows * size_t(cfg.v_dim()) * 2, "v_cache"));
            zero->fill(*kc_.back(), 0, kc_.back()->size() / 4 * 4, 0u);
            zero->fill(*vc_.back(), 0, vc_.back()->size() / 4 * 4, 0u);
        }
        dev.submit(*zero);
    }

    // Rope frequencies in double, sent as hi/lo float pairs (rope_table.gk.h).
    const int64_t half = cfg.n_rot / 2;
    for (const LayerConfig& lc : cfg.layers) {
        size_t idx = ropes_.size();
        for (size_t j = 0; j < ropes_.size(); ++j)
            if (ropes_[j]->base == lc.rope_base && ropes_[j]->scale == lc.rope_scale) idx = j;
        if (idx == ropes_.size()) {
            auto r = std::make_unique<RopeTab>();
            r->base = lc.rope_base;
            r->scale = lc.rope_scale;
            std::vector<float> f(size_t(2 * half));
            for (int64_t i = 0; i < half; ++i) {
                double freq = std::pow(lc.rope_base, -2.0 * double(i) / double(cfg.n_rot));
                if (!w.rope_freqs.empty()) freq /= double(w.rope_freqs[size_t(i)]);
                freq *= lc.rope_scale;
                f[size_t(2 * i)] = float(freq);
                f[size_t(2 * i + 1)] = float(freq - double(float(freq)));
            }
            r->freqs = dev.alloc(f.size() * F, "rope_freqs");
            dev.upload(*r->freqs, 0, f.data(), f.size() * F);
            r->tab = dev.alloc(B * size_t(half) * 2 * F, "rope_table");
            ropes_.push_back(std::move(r));
        }
        layer_rope_.push_back(idx);
    }
}

GpuForward::~GpuForward() = default;

gpu::Buffer& GpuForward::grow(std::unique_ptr<gpu::Buffer>& buf, size_t bytes, const char* label,
                              bool host) {
    if (!buf || buf->size() < bytes)
        buf = host ? device_->alloc_host(bytes, label) : device_->alloc(bytes, label);
    return *buf;
}

GpuForward::Staged GpuForward::stage(gpu::Encoder& e,
                                     std::initializer_list<const DeviceMatrix*> ms,
                                     gpu::Buffer& x, uint32_t x_off, uint32_t x_stride,
                                     int64_t cols, int64_t n, const ProjectionInput& in) {
    const bool coopmat = coopmat_ && !recorded_.exact;
    Staged st;
    st.panel = true;
    st.q8 = true;
    bool any = false;
    for (const DeviceMatrix* m : ms) {  // an empty one is a neighbour's part (gpu_weights.h)
        if (m->empty()) continue;
        any = true;
        if (m->cols != cols || !gpu::staged_panel(m->format, cols, n, in.mode, coopmat))
            st.panel = false;
        if (m->cols != cols || gpu::matvec_q8_stamp(*m, n, in.mode, recorded_.exact).empty())
            st.q8 = false;
    }
    if (!any) return Staged();
    if (st.panel) {
        st.q8 = false;
        gpu::stage_input(e, x, x_off, x_stride, cols, n, in, *panel_, *dummy_);
        e.barrier();
    } else if (st.q8) {
        gpu::quantize_q8(e, x, x_off, x_stride, cols, n, in, *q8_, *dummy_);
        e.barrier();
    }
    return st;
}

void GpuForward::rmsnorm(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_off, gpu::Buffer& w,
                         int64_t rows, int64_t width, gpu::Buffer& y, uint32_t y_off,
                         const char* stamp_name) {
    gk::rmsnorm a{};
    a.n = u32(width);
    a.rows = u32(rows);
    a.x_off = x_off;
    a.y_off = y_off;
    a.w_off = 0;
    a.eps = float(cfg_.rms_eps);
    e.dispatch(require_stamp(stamp_name), {&x, &w, &y}, a, u32(rows));
}

void GpuForward::eltwise(gpu::Encoder& e, const char* op, gpu::Buffer& y, uint32_t y_off,
                         gpu::Buffer& x, uint32_t x_off, int64_t n, float s) {
    gk::eltwise a{};
    a.n = u32(n);
    a.y_off = y_off;
    a.x_off = x_off;
    a.s = s;
    e.dispatch(require_stamp(std::string("eltwise_") + op), {&y, &x}, a,
               stride_groups(n, kEltwiseGroup));
}

void GpuForward::attention_layer(gpu::Encoder& e, int il, int64_t n) {
    const ModelConfig& c = cfg_;
    const LayerConfig& lc = c.layers[size_t(il)];
    const DeviceLayer& l = weights_.layers[size_t(il)];
    const uint32_t qd = u32(c.q_dim()), kd = u32(c.k_dim());
    const uint32_t row = u32(c.q_dim() + c.k_dim() + c.v_dim());  // packed [q | k | v]

    // The block's input norm is the projection's input stage.
    const uint32_t E = u32(c.n_embd);
    const ProjectionInput in = normed(*l.attn_norm);
    if (!l.wqkv.splits.empty()) {
        const Staged st = stage(e, {&l.wqkv}, *x_, 0, E, c.n_embd, n, in);
        project_in(e, st, l.wqkv, *x_, 0, E, *qkv_, 0, row, n, false, in);
    } else {
        const Staged st = stage(e, {&l.wq, &l.wk, &l.wv}, *x_, 0, E, c.n_embd, n, in);
        project_in(e, st, l.wq, *x_, 0, E, *qkv_, 0, row, n, false, in);
        if (!l.wk.empty()) project_in(e, st, l.wk, *x_, 0, E, *qkv_, qd, row, n, false, in);
        if (!l.wv.empty()) project_in(e, st, l.wv, *x_, 0, E, *qkv_, qd + kd, row, n, false, in);
    }
    e.barrier();

    // Bias, q/k norms, rope, and the K/V rows into the cache, in one pass a sequence.
    gpu::Buffer& tab = *ropes_[layer_rope_[size_t(il)]]->tab;
    gpu::Buffer& kc = *(*call_.k)[size_t(il)];
    gpu::Buffer& vc = *(*call_.v)[size_t(il)];
    gpu::Buffer* dummy = dummy_.get();
    const bool neox = c.rope_layout == RopeLayout::Neox;
    for (const CallSeq& q : call_.seqs) {
        gk::qkv_rope_store r{};
        r.n_head = u32(c.n_head);
        r.n_head_kv = u32(c.n_head_kv);
        r.head_dim = u32(c.head_dim);
        r.n_rot = u32(c.n_rot);
        r.qkv_off = u32(q.row0 * row);
        r.qkv_stride = row;
        r.dst_pos = u32(q.kv_row);  // plus the sequence's position
        r.tab_off = u32(q.row0 * c.n_rot);
        r.flags = (c.qk_norm ? 1u : 0u) | (c.qkv_bias ? 2u : 0u);
        r.eps = float(c.rms_eps);
        e.dispatch(require_stamp(neox ? "qkv_rope_store_neox" : "qkv_rope_store_norm"),
                   {qkv_.get(), &tab, &kc, &vc, c.qk_norm ? l.q_norm.get() : dummy,
                    c.qk_norm ? l.k_norm.get() : dummy, c.qkv_bias ? l.bqkv.get() : dummy,
                    q.pos},
                   r, u32(c.n_head + 2 * c.n_head_kv), u32(q.n));
    }
    e.barrier();

    for (const CallSeq& q : call_.seqs) {
        gk::attention a{};
        a.n_tok = u32(q.n);
        a.n_head = u32(c.n_head);
        a.n_head_kv = u32(c.n_head_kv);
        a.head_dim = u32(c.head_dim);
        a.head_dim_v = u32(c.head_dim_v);
        a.pos0 = 0;  // the sequence's position is q.pos[0]
        a.window = lc.sliding ? u32(c.sliding_window) : 0u;
        a.q_off = u32(q.row0 * row);
        a.q_stride = row;
        a.k_off = u32(q.kv_row * kd);
        a.v_off = u32(q.kv_row * c.v_dim());
        a.out_stride = u32(c.n_head * c.head_dim_v);
        a.out_off = u32(q.row0) * a.out_stride;
        a.scale = c.attn_scale;
        const bool decode = q.n <= kAttnDecodeMaxTokens;
        const std::string cm = prefill_attention_coopmat(q.n, c.head_dim, c.head_dim_v,
                                                         coopmat_ && !recorded_.exact);
        const int64_t tile = !cm.empty() ? kAttnGranule : int64_t(1) << kAttnPrefillRowsLog2.get();
        const std::string stamp = decode        ? "attention_decode"
                                  : !cm.empty() ? cm
                                  : tile == 16  ? "attention_prefill"
                                                : "attention_prefill_" + std::to_string(tile);
        const int64_t splits = decode ? recorded_.attn_splits : 0;  // 0 for several sequences
        if (splits > 0) {
            e.dispatch(require_stamp("attention_decode_split"),
                       {qkv_.get(), &kc, &vc, attn_parts_.get(), q.pos}, a, u32(c.n_head),
                       u32(q.n), u32(splits));
            e.barrier();
            gk::attention_merge m{};
            m.n_tok = u32(q.n);
            m.n_head = u32(c.n_head);
            m.head_dim_v = u32(c.head_dim_v);
            m.n_split = u32(splits);
            m.out_off = a.out_off;
            m.out_stride = a.out_stride;
            e.dispatch(require_stamp("attention_merge"), {attn_parts_.get(), attn_.get()}, m,
                       u32(c.n_head), u32(q.n));
        } else {
            e.dispatch(require_stamp(stamp), {qkv_.get(), &kc, &vc, attn_.get(), q.pos}, a,
                       u32(c.n_head), decode ? u32(q.n) : ceil_div(q.n, tile));
        }
    }
    e.barrier();
}

void GpuForward::run(const int32_t* ids, int64_t n, int64_t pos0, bool all_logits, float* logits,
                     bool exact) {
    for (int64_t start = 0; start < n; start += max_batch_) {
        const int64_t len = std::min(max_batch_, n - start);
        const bool last = start + len == n;
        float* out = all_logits ? logits + start * cfg_.n_vocab : (last ? logits : nullptr);
        run_chunk(ids + start, len, pos0 + start, all_logits, out, exact);
    }
}

void GpuForward::load_ids(const int32_t* ids, int64_t n) {
    const ModelConfig& c = cfg_;
    const uint32_t E = u32(c.n_embd);
    if (weights_.token_embd.splits.size() == 1) {
        std::memcpy(ids_->mapped(), ids, size_t(n) * sizeof(int32_t));
        return;
    }
    // A table of several bindings is gathered on the host.
    gpu::Buffer& in = grow(embd_in_, size_t(max_batch_) * E * sizeof(float), "embd_in", true);
    float* rows = static_cast<float*>(in.mapped());
    for (int64_t t = 0; t < n; ++t) {
        cpu::get_row(host_w_.token_embd, ids[t], rows + t * E);
        if (c.embd_scale != 1.0f)
            for (uint32_t i = 0; i < E; ++i) rows[t * E + i] *= c.embd_scale;
    }
}

void GpuForward::run_chunk(const int32_t* ids, int64_t n, int64_t pos0, bool all_logits,
                           float* logits, bool exact) {
    if (pos0 + n > n_ctx_)
        throw ShapeError("GPU forward: positions up to " + std::to_string(pos0 + n) +
                         " exceed n_ctx " + std::to_string(n_ctx_));
    const ModelConfig& c = cfg_;
    const uint32_t E = u32(c.n_embd);
    gpu::Device& dev = *device_;

    // The call's inputs, in mapped memory the recording reads.
    *static_cast<uint32_t*>(step_->mapped()) = u32(pos0);
    load_ids(ids, n);

    const Shape shape{n, all_logits, logits != nullptr, dev.profiling(), exact,
                      tuning::generation(), decode_attention_splits(n, c.n_head, pos0 + n)};
    call_.seqs.assign(1, CallSeq{0, n, 0, step_.get()});
    call_.k = &kc_;
    call_.v = &vc_;
    call_.out_rows.clear();
    for (int64_t r = all_logits ? 0 : n - 1; logits && r < n; ++r) call_.out_rows.push_back(r);
    submit(shape, logits, all_logits ? n : 1);
}

void GpuForward::submit(const Shape& shape, float* logits, int64_t logit_rows) {
    gpu::Device& dev = *device_;
    last_replayed_ = recording_ && recorded_ == shape && kReplay.get() != 0;
    if (!last_replayed_) {
        recording_.reset();  // its buffers may be regrown below
        std::unique_ptr<gpu::Encoder> enc = dev.encoder();
        recorded_ = shape;  // record() reads it
        record(*enc, shape);
        recording_ = std::move(enc);
    }
    dev.submit(*recording_);
    last_dispatches_ = recording_->dispatches();
    if (logits)
        std::memcpy(logits, logits_host_->mapped(),
                    size_t(logit_rows * cfg_.n_vocab) * sizeof(float));
}

void GpuForward::run_batch(const int32_t* ids, const DeviceRows* seqs, int n_seqs,
                           DeviceKVPool& pool, float* logits, bool exact) {
    const ModelConfig& c = cfg_;
    Shape shape{0, false, false, device_->profiling(), exact, tuning::generation(), 0};
    shape.pool = pool.id;
    call_.seqs.clear();
    call_.out_rows.clear();
    while (seq_pos_.size() < size_t(n_seqs))
        seq_pos_.push_back(device_->alloc_host(4 * sizeof(uint32_t), "sequence_position"));
    int64_t n = 0;
    for (int i = 0; i < n_seqs; ++i) {
        const DeviceRows& q = seqs[i];
        if (q.slot < 0 || q.slot >= pool.n_slots)
            throw std::invalid_argument("GPU batch: sequence " + std::to_string(i) + " names slot " +
                                        std::to_string(q.slot) + ", outside [0, " +
                                        std::to_string(pool.n_slots) + ")");
        if (q.n <= 0 || q.pos0 < 0 || q.pos0 + q.n > pool.n_ctx)
            throw ShapeError("GPU batch: sequence " + std::to_string(i) + " has positions [" +
                             std::to_string(q.pos0) + ", " + std::to_string(q.pos0 + q.n) +
                             ") of a slot of n_ctx " + std::to_string(pool.n_ctx));
        *static_cast<uint32_t*>(seq_pos_[size_t(i)]->mapped()) = u32(q.pos0);
        call_.seqs.push_back(CallSeq{n, q.n, int64_t(q.slot) * pool.slot_rows,
                                     seq_pos_[size_t(i)].get()});
        shape.layout.insert(shape.layout.end(), {q.slot, q.n, q.want_logits ? 1 : 0});
        n += q.n;
        if (q.want_logits) call_.out_rows.push_back(n - 1);
    }
    if (n == 0) throw ShapeError("GPU batch: no rows");
    if (n > max_batch_)
        throw ShapeError("GPU batch: " + std::to_string(n) + " rows exceed max_batch " +
                         std::to_string(max_batch_));
    call_.k = &pool.k;
    call_.v = &pool.v;
    shape.n = n;
    shape.logits = !call_.out_rows.empty();
    // The chunks of a split share one buffer, so only a call of one sequence splits.
    if (n_seqs == 1) shape.attn_splits = decode_attention_splits(n, c.n_head, seqs[0].pos0 + n);
    load_ids(ids, n);
    submit(shape, shape.logits ? logits : nullptr, int64_t(call_.out_rows.size()));
}

void GpuForward::record(gpu::Encoder& e, const Shape& shape) {
    const ModelConfig& c = cfg_;
    const uint32_t E = u32(c.n_embd);
    const int64_t n = shape.n;

    // --- embedding: gathered on the device when the table is one binding, else on the host.
    if (weights_.token_embd.splits.size() == 1) {
        gk::get_rows a{};
        a.cols = E;
        a.n_ids = u32(n);
        a.ids_off = 0;
        a.out_off = 0;
        a.scale = c.embd_scale;
        e.dispatch(require_stamp("get_rows_" + weights_.token_embd.format),
                   {weights_.token_embd.splits[0].buffer.get(), ids_.get(), x_.get()}, a, u32(n));
    } else {
        e.copy(*embd_in_, 0, *x_, 0, size_t(n) * E * sizeof(float));
    }
    for (const auto& r : ropes_) {
        for (const CallSeq& q : call_.seqs) {
            gk::rope_table a{};
            a.n_half = u32(c.n_rot / 2);
            a.n_tok = u32(q.n);
            a.pos0 = 0;  // the sequence's position is q.pos[0]
            a.row0 = u32(q.row0);
            e.dispatch(require_stamp("rope_table"), {r->freqs.get(), r->tab.get(), q.pos}, a,
                       stride_groups(q.n * (c.n_rot / 2), kRopeTableGroup));
        }
    }
    e.barrier();

    // --- layers: the norms before each projection are its input stage (mm_input.h).
    for (int il = 0; il < int(c.n_layer); ++il) {
        const DeviceLayer& l = weights_.layers[size_t(il)];
        attention_layer(e, il, n);
        const uint32_t attn_w = u32(c.n_head * c.head_dim_v);
        const Staged st_o = stage(e, {&l.wo}, *attn_, 0, attn_w, attn_w, n, ProjectionInput());
        if (c.post_norms) {
            project_in(e, st_o, l.wo, *attn_, 0, attn_w, *out_, 0, E, n, false);
            e.barrier();
            rmsnorm(e, *out_, 0, *l.post_attn_norm, n, c.n_embd, *x_, 0, "rmsnorm_add");
        } else {
            project_in(e, st_o, l.wo, *attn_, 0, attn_w, *x_, 0, E, n, true);
        }
        e.barrier();

        const uint32_t ff = u32(c.n_ff);
        const ProjectionInput in = normed(*l.ffn_norm);
        if (!l.ffn_gate_up.splits.empty()) {
            const Staged st = stage(e, {&l.ffn_gate_up}, *x_, 0, E, c.n_embd, n, in);
            project_in(e, st, l.ffn_gate_up, *x_, 0, E, *gate_up_, 0, 2 * ff, n, false, in);
        } else {
            const Staged st = stage(e, {&l.ffn_gate, &l.ffn_up}, *x_, 0, E, c.n_embd, n, in);
            project_in(e, st, l.ffn_gate, *x_, 0, E, *gate_up_, 0, 2 * ff, n, false, in);
            project_in(e, st, l.ffn_up, *x_, 0, E, *gate_up_, ff, 2 * ff, n, false, in);
        }
        e.barrier();
        ProjectionInput gated{c.gelu_ffn ? 3u : 2u, nullptr, ff, 0.0f};
        // On the integer-dot path the quantizer forms act(gate) * up once on its way in, so the
        // pass would only add a dispatch (8B Q4_K on an H200: the step 3.94 -> 3.90 ms without).
        const bool down_q8 =
            !gpu::matvec_q8_stamp(l.ffn_down, n, gated.mode, recorded_.exact).empty();
        if (decode_glu_pass(n) && !down_q8) {  // the gate half becomes act(gate) * up, read plain
            eltwise(e, c.gelu_ffn ? "glu_gelu" : "glu_silu", *gate_up_, 0, *gate_up_, ff, ff,
                    0.0f);
            e.barrier();
            gated = ProjectionInput();
        }
        const Staged st_d = stage(e, {&l.ffn_down}, *gate_up_, 0, 2 * ff, ff, n, gated);
        if (c.post_norms) {
            project_in(e, st_d, l.ffn_down, *gate_up_, 0, 2 * ff, *out_, 0, E, n, false, gated);
            e.barrier();
            rmsnorm(e, *out_, 0, *l.post_ffn_norm, n, c.n_embd, *x_, 0, "rmsnorm_add");
        } else {
            project_in(e, st_d, l.ffn_down, *gate_up_, 0, 2 * ff, *x_, 0, E, n, true, gated);
        }
        e.barrier();
    }

    if (shape.logits) head(e);
}

void GpuForward::head(gpu::Encoder& e) {
    const ModelConfig& c = cfg_;
    const uint32_t E = u32(c.n_embd);
    const std::vector<int64_t>& out = call_.out_rows;
    const int64_t rows = int64_t(out.size());
    // The head reads one run of rows: the call's wanted rows when they are one, else copies.
    bool run = true;
    for (int64_t i = 1; i < rows; ++i) run = run && out[size_t(i)] == out[0] + i;
    gpu::Buffer* x = x_.get();
    uint32_t first = u32(out[0]);
    if (!run) {
        x = &grow(head_rows_, size_t(max_batch_) * E * sizeof(float), "head_rows", false);
        for (int64_t i = 0; i < rows; ++i)
            e.copy(*x_, size_t(out[size_t(i)]) * E * sizeof(float), *x, size_t(i) * E * sizeof(float),
                   size_t(E) * sizeof(float));
        e.barrier();
        first = 0;
    }
    const size_t bytes = size_t(rows * c.n_vocab) * sizeof(float);
    gpu::Buffer& dl = grow(logits_, bytes, "logits", false);
    const DeviceMatrix& out_w = weights_.output.splits.empty() ? weights_.token_embd
                                                               : weights_.output;
    const ProjectionInput head_in = normed(*weights_.output_norm);
    const std::string q8 = gpu::matvec_q8_stamp(out_w, rows, head_in.mode, recorded_.exact);
    if (!q8.empty()) {  // the head alone reads its input: the float16 panel never pays
        gpu::quantize_q8(e, *x, first * E, E, c.n_embd, rows, head_in, *q8_, *dummy_);
        e.barrier();
        gpu::project_q8(e, out_w, q8, *q8_, dl, 0, u32(c.n_vocab), rows, false);
    } else {
        project(e, out_w, *x, first * E, E, dl, 0, u32(c.n_vocab), rows, false, head_in);
    }
    e.barrier();
    if (c.final_logit_softcap > 0.0) {
        eltwise(e, "softcap", dl, 0, *dummy_, 0, rows * c.n_vocab, float(c.final_logit_softcap));
        e.barrier();
    }
    gpu::Buffer& hl = grow(logits_host_, bytes, "logits_host", true);
    e.copy(dl, 0, hl, 0, bytes);
}

namespace {

// Rows [row0, row0 + n) of an f16 cache buffer of rows `width` wide, as float32, and back.
void download_rows(gpu::Device& dev, gpu::Buffer& cache, int64_t width, int64_t row0, int64_t n,
                   std::vector<float>& out) {
    std::vector<uint16_t> halves(size_t(n * width));
    dev.download(cache, size_t(row0 * width) * 2, halves.data(), halves.size() * 2);
    out.resize(halves.size());
    f16_traits().dequantize(reinterpret_cast<const uint8_t*>(halves.data()), out.data(),
                            int64_t(halves.size()));
}

void upload_rows(gpu::Device& dev, gpu::Buffer& cache, int64_t width, int64_t row0, int64_t n,
                 const float* src) {
    std::vector<uint16_t> halves(size_t(n * width));
    f16_traits().quantize(src, reinterpret_cast<uint8_t*>(halves.data()), int64_t(halves.size()));
    dev.upload(cache, size_t(row0 * width) * 2, halves.data(), halves.size() * 2);
}

}  // namespace

void GpuForward::read_kv(int layer, int64_t pos0, int64_t n, std::vector<float>& k,
                         std::vector<float>& v) {
    download_rows(*device_, *kc_[size_t(layer)], cfg_.k_dim(), pos0, n, k);
    download_rows(*device_, *vc_[size_t(layer)], cfg_.v_dim(), pos0, n, v);
}

void GpuForward::write_kv(int layer, int64_t pos0, int64_t n, const float* k, const float* v) {
    upload_rows(*device_, *kc_[size_t(layer)], cfg_.k_dim(), pos0, n, k);
    upload_rows(*device_, *vc_[size_t(layer)], cfg_.v_dim(), pos0, n, v);
}

std::unique_ptr<DeviceKVPool> GpuForward::make_kv_pool(int n_slots, int64_t n_ctx) {
    if (n_slots < 1 || n_ctx < 1)
        throw ShapeError("GPU KV pool: " + std::to_string(n_slots) + " slots of " +
                         std::to_string(n_ctx) + " positions");
    gpu::Device& dev = *device_;
    static std::atomic<uint64_t> last_id{0};
    auto pool = std::make_unique<DeviceKVPool>();
    pool->device = device_;
    pool->id = ++last_id;
    pool->n_slots = n_slots;
    pool->n_ctx = n_ctx;
    pool->slot_rows = device_cache_rows(n_ctx);  // whole granules: a slot's reads stay in it
    const size_t rows = size_t(n_slots) * size_t(pool->slot_rows);
    std::unique_ptr<gpu::Encoder> enc = dev.encoder();
    for (int64_t i = 0; i < cfg_.n_layer; ++i) {
        pool->k.push_back(dev.alloc(rows * size_t(cfg_.k_dim()) * 2, "pool_k_cache"));
        pool->v.push_back(dev.alloc(rows * size_t(cfg_.v_dim()) * 2, "pool_v_cache"));
        // Zero-filled: the coopmat attention reads whole granules past the last written row.
        enc->fill(*pool->k.back(), 0, pool->k.back()->size() / 4 * 4, 0u);
        enc->fill(*pool->v.back(), 0, pool->v.back()->size() / 4 * 4, 0u);
        pool->bytes += pool->k.back()->size() + pool->v.back()->size();
    }
    dev.submit(*enc);
    return pool;
}

void GpuForward::read_kv(DeviceKVPool& pool, int slot, int layer, int64_t pos0, int64_t n,
                         std::vector<float>& k, std::vector<float>& v) {
    const int64_t row0 = int64_t(slot) * pool.slot_rows + pos0;
    download_rows(*device_, *pool.k[size_t(layer)], cfg_.k_dim(), row0, n, k);
    download_rows(*device_, *pool.v[size_t(layer)], cfg_.v_dim(), row0, n, v);
}

void GpuForward::write_kv(DeviceKVPool& pool, int slot, int layer, int64_t pos0, int64_t n,
                          const float* k, const float* v) {
    const int64_t row0 = int64_t(slot) * pool.slot_rows + pos0;
    upload_rows(*device_, *pool.k[size_t(layer)], cfg_.k_dim(), row0, n, k);
    upload_rows(*device_, *pool.v[size_t(layer)], cfg_.v_dim(), row0, n, v);
}

}  // namespace dasllama
