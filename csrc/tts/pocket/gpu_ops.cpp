#include "tts/pocket/gpu_ops.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "gk_args.h"
#include "gpu/matrix.h"

namespace dasllama::pocket {

namespace {

namespace gk = gpu::gk_args;

// Threads of the grid-stride kernels (their GK_WG).
constexpr uint32_t kStrideGroup = 256;
constexpr uint32_t kRopeTableGroup = 64;

uint32_t u32(int64_t v) { return uint32_t(v); }
uint32_t ceil_div(int64_t a, int64_t b) { return uint32_t((a + b - 1) / b); }
uint32_t grid(int64_t items, int64_t per_group) { return gpu::stride_groups(items, per_group); }

}  // namespace

const gpu::StampInfo& pocket_stamp(const std::string& name) { return gpu::require_stamp(name); }

GpuOps::GpuOps(std::shared_ptr<gpu::Device> device) : device_(std::move(device)) {
    dummy_ = device_->alloc(16, "unused binding");
    // rope_table adds a position base read from memory; these calls pass theirs in arguments.
    const uint32_t zero = 0;
    zero_base_ = device_->alloc(sizeof(zero), "position base 0");
    device_->upload(*zero_base_, 0, &zero, sizeof(zero));
    coopmat_ = device_->info().coopmat_khr;
}

void GpuOps::linear(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer* bias, gpu::Buffer& x,
                    uint32_t x_off, uint32_t x_stride, gpu::Buffer& y, uint32_t y_off,
                    uint32_t y_stride, int64_t n, bool accumulate) {
    gpu::project(e, m, x, x_off, x_stride, y, y_off, y_stride, n, accumulate, *dummy_, coopmat_);
    if (bias) {
        // As pocket::linear: the product first, then the bias added to it.
        e.barrier();
        add_scale(e, y, y_off, y_stride, *bias, 0, 0, m.rows, n);
    }
}

void GpuOps::layernorm(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_off, gpu::Buffer* w,
                       gpu::Buffer* b, int64_t rows, int64_t width, double eps, gpu::Buffer& y,
                       uint32_t y_off, gpu::Buffer* mod, uint32_t mod_off) {
    gk::layernorm a{};
    a.n = u32(width);
    a.rows = u32(rows);
    a.x_off = x_off;
    a.y_off = y_off;
    a.affine = w ? 1u : 0u;
    a.modulate = mod ? 1u : 0u;
    a.mod_off = mod_off;
    a.eps = float(eps);
    e.dispatch(pocket_stamp("layernorm"),
               {&x, w ? w : dummy_.get(), b ? b : dummy_.get(), mod ? mod : dummy_.get(), &y}, a,
               u32(rows));
}

void GpuOps::rows(gpu::Encoder& e, const char* op, gpu::Buffer& src, uint32_t src_off,
                  uint32_t src_stride, gpu::Buffer& dst, uint32_t dst_off, uint32_t dst_stride,
                  int64_t width, int64_t n_rows) {
    gk::rows a{};
    a.width = u32(width);
    a.rows = u32(n_rows);
    a.src_off = src_off;
    a.src_stride = src_stride;
    a.dst_off = dst_off;
    a.dst_stride = dst_stride;
    e.dispatch(pocket_stamp(std::string("rows_") + op), {&src, &dst}, a,
               grid(width * n_rows, kStrideGroup));
}

void GpuOps::add_scale(gpu::Encoder& e, gpu::Buffer& y, uint32_t y_off, uint32_t y_stride,
                       gpu::Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t width,
                       int64_t n_rows, gpu::Buffer* s, uint32_t s_off, float div) {
    gk::add_scale a{};
    a.n = u32(width);
    a.rows = u32(n_rows);
    a.y_off = y_off;
    a.y_stride = y_stride;
    a.x_off = x_off;
    a.x_stride = x_stride;
    a.s_off = s_off;
    a.use_s = s ? 1u : 0u;
    a.div = div;
    e.dispatch(pocket_stamp("add_scale"), {&y, &x, s ? s : dummy_.get()}, a,
               grid(width * n_rows, kStrideGroup));
}

void GpuOps::rope_table(gpu::Encoder& e, gpu::Buffer& freqs, gpu::Buffer& tab, int64_t half,
                        int64_t n_tok, int64_t pos0) {
    gk::rope_table a{};
    a.n_half = u32(half);
    a.n_tok = u32(n_tok);
    a.pos0 = u32(pos0);
    e.dispatch(pocket_stamp("rope_table"), {&freqs, &tab, zero_base_.get()}, a,
               grid(n_tok * half, kRopeTableGroup));
}

void GpuOps::rope(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_stride, int64_t n_tok,
                  int64_t n_head, int64_t head_dim, gpu::Buffer& tab) {
    // pocket::TransformerRunner rotates pairs (2i, 2i + 1) of the whole head (cpu::rope, NORM).
    gk::rope a{};
    a.n_tok = u32(n_tok);
    a.n_head = u32(n_head);
    a.head_dim = u32(head_dim);
    a.n_rot = u32(head_dim);
    a.x_off = 0;
    a.x_stride = x_stride;
    a.tab_off = 0;
    e.dispatch(pocket_stamp("rope_norm"), {&x, &tab}, a,
               grid(n_tok * n_head * head_dim / 2, kStrideGroup));
}

void GpuOps::attention(gpu::Encoder& e, gpu::Buffer& q, uint32_t q_stride, gpu::Buffer& kc,
                       gpu::Buffer& vc, uint32_t kv_stride, gpu::Buffer& out, uint32_t out_stride,
                       int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                       int64_t pos0, int64_t window, float scale) {
    gk::attention_f32 a{};
    a.n_tok = u32(n_tok);
    a.n_head = u32(n_head);
    a.n_head_kv = u32(n_head_kv);
    a.head_dim = u32(head_dim);
    a.pos0 = u32(pos0);
    a.window = u32(window);
    a.q_off = 0;
    a.q_stride = q_stride;
    a.kv_stride = kv_stride;
    a.k_off = 0;
    a.v_off = 0;
    a.out_off = 0;
    a.out_stride = out_stride;
    a.scale = scale;
    e.dispatch(pocket_stamp("attention_f32"), {&q, &kc, &vc, &out}, a, u32(n_head), u32(n_tok));
}

// =============================================================================================
// GpuTransformer
// =============================================================================================

GpuTransformer::GpuTransformer(GpuOps& ops, const DeviceTransformer& w) : ops_(ops), w_(w) {}

void GpuTransformer::reserve_rows(int64_t n) {
    if (n <= rows_) return;
    const TransformerConfig& c = w_.cfg;
    gpu::Device& dev = ops_.device();
    const size_t N = size_t(n), F = sizeof(float);
    h_ = dev.alloc(N * size_t(c.d_model) * F, "tf.h");
    q_ = dev.alloc(N * size_t(c.num_heads * c.head_dim) * F, "tf.q");
    k_ = dev.alloc(N * size_t(kv_width()) * F, "tf.k");
    v_ = dev.alloc(N * size_t(kv_width()) * F, "tf.v");
    attn_ = dev.alloc(N * size_t(c.num_heads * c.head_dim) * F, "tf.attn");
    out_ = dev.alloc(N * size_t(c.d_model) * F, "tf.out");
    ff_ = dev.alloc(N * size_t(c.ffn_dim) * F, "tf.ff");
    tab_ = dev.alloc(N * size_t(c.head_dim) * F, "tf.rope_table");
    rows_ = n;
}

bool GpuTransformer::reserve_cache(int64_t n_ctx) {
    if (n_ctx <= capacity_) return false;
    gpu::Device& dev = ops_.device();
    kc_.clear();
    vc_.clear();
    capacity_ = 0;
    const size_t bytes = size_t(n_ctx) * size_t(kv_width()) * sizeof(float);
    for (size_t i = 0; i < w_.layers.size(); ++i) {
        kc_.push_back(dev.alloc(bytes, "tf.k_cache"));
        vc_.push_back(dev.alloc(bytes, "tf.v_cache"));
    }
    capacity_ = n_ctx;
    return true;
}

void GpuTransformer::record(gpu::Encoder& e, gpu::Buffer& x, int64_t n, int64_t pos0,
                            bool kv_only_last) {
    if (n > rows_ || pos0 + n > capacity_)
        throw ShapeError("pocket GPU transformer: " + std::to_string(n) + " rows at position " +
                         std::to_string(pos0) + " exceed its buffers (" + std::to_string(rows_) +
                         " rows, " + std::to_string(capacity_) + " positions)");
    const TransformerConfig& c = w_.cfg;
    const int64_t D = c.d_model, hd = c.head_dim, kvw = kv_width();
    const uint32_t qw = uint32_t(c.num_heads * hd), ud = uint32_t(D), ukv = uint32_t(kvw);
    const float scale = float(1.0 / std::sqrt(double(hd)));
    ops_.rope_table(e, *w_.rope_freqs, *tab_, hd / 2, n, pos0);
    e.barrier();
    const int n_layers = int(w_.layers.size());
    for (int il = 0; il < n_layers; ++il) {
        const DeviceTransformerLayer& l = w_.layers[size_t(il)];
        const bool kv_only = kv_only_last && il == n_layers - 1;
        ops_.layernorm(e, x, 0, l.norm1_w.get(), l.norm1_b.get(), n, D, c.norm_eps, *h_, 0);
        e.barrier();
        if (!kv_only) ops_.linear(e, l.wq, nullptr, *h_, 0, ud, *q_, 0, qw, n);
        ops_.linear(e, l.wk, nullptr, *h_, 0, ud, *k_, 0, ukv, n);
        ops_.linear(e, l.wv, nullptr, *h_, 0, ud, *v_, 0, ukv, n);
        e.barrier();
        if (!kv_only) ops_.rope(e, *q_, qw, n, c.num_heads, hd, *tab_);
        ops_.rope(e, *k_, ukv, n, c.num_kv_heads, hd, *tab_);
        e.barrier();
        ops_.rows(e, "copy", *k_, 0, ukv, *kc_[size_t(il)], uint32_t(pos0 * kvw), ukv, kvw, n);
        ops_.rows(e, "copy", *v_, 0, ukv, *vc_[size_t(il)], uint32_t(pos0 * kvw), ukv, kvw, n);
        e.barrier();
        if (kv_only) break;
        ops_.attention(e, *q_, qw, *kc_[size_t(il)], *vc_[size_t(il)], ukv, *attn_, qw, n,
                       c.num_heads, c.num_kv_heads, hd, pos0, c.context, scale);
        e.barrier();
        // Residual branches: straight into x, or through the layer scale (Mimi).
        if (l.attn_scale) {
            ops_.linear(e, l.wo, nullptr, *attn_, 0, qw, *out_, 0, ud, n);
            e.barrier();
            ops_.add_scale(e, x, 0, ud, *out_, 0, ud, D, n, l.attn_scale.get());
        } else {
            ops_.linear(e, l.wo, nullptr, *attn_, 0, qw, x, 0, ud, n, true);
        }
        e.barrier();
        ops_.layernorm(e, x, 0, l.norm2_w.get(), l.norm2_b.get(), n, D, c.norm_eps, *h_, 0);
        e.barrier();
        const uint32_t ff = uint32_t(c.ffn_dim);
        ops_.linear(e, l.up, nullptr, *h_, 0, ud, *ff_, 0, ff, n);
        e.barrier();
        ops_.rows(e, "gelu", *ff_, 0, ff, *ff_, 0, ff, c.ffn_dim, n);
        e.barrier();
        if (l.ffn_scale) {
            ops_.linear(e, l.down, nullptr, *ff_, 0, ff, *out_, 0, ud, n);
            e.barrier();
            ops_.add_scale(e, x, 0, ud, *out_, 0, ud, D, n, l.ffn_scale.get());
        } else {
            ops_.linear(e, l.down, nullptr, *ff_, 0, ff, x, 0, ud, n, true);
        }
        e.barrier();
    }
}

void GpuTransformer::upload_rows(int layer, int64_t pos0, int64_t n, const float* k,
                                 const float* v) {
    const size_t off = size_t(pos0 * kv_width()) * sizeof(float);
    const size_t bytes = size_t(n * kv_width()) * sizeof(float);
    ops_.device().upload(*kc_[size_t(layer)], off, k, bytes);
    ops_.device().upload(*vc_[size_t(layer)], off, v, bytes);
}

void GpuTransformer::download_rows(int layer, int64_t pos0, int64_t n, float* k, float* v) {
    const size_t off = size_t(pos0 * kv_width()) * sizeof(float);
    const size_t bytes = size_t(n * kv_width()) * sizeof(float);
    ops_.device().download(*kc_[size_t(layer)], off, k, bytes);
    ops_.device().download(*vc_[size_t(layer)], off, v, bytes);
}

}  // namespace dasllama::pocket
