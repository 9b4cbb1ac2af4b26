#include "tts/pocket/gpu_ops.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/tuning.h"
#include "gk_args.h"
#include "gpu/matrix.h"

namespace dasllama::pocket {

namespace {

namespace gk = gpu::gk_args;

// Threads of the grid-stride kernels (their GK_WG).
constexpr uint32_t kStrideGroup = 256;

// Whether a call submits again the command buffer recorded for an earlier call of its shape
// (1) or records every call (0). Both run the same dispatches on the same buffers: results are
// identical.
const tuning::Knob& kReplay = tuning::define(
    "vulkan.pocket.replay", 1, 0, 1,
    "1: Pocket's frames and codec seats replay the command buffer of an earlier call of the "
    "same shape; 0: record every call");

uint32_t u32(int64_t v) { return uint32_t(v); }
uint32_t ceil_div(int64_t a, int64_t b) { return uint32_t((a + b - 1) / b); }
uint32_t grid(int64_t items, int64_t per_group) { return gpu::stride_groups(items, per_group); }

}  // namespace

const gpu::StampInfo& pocket_stamp(const std::string& name) { return gpu::require_stamp(name); }

bool pocket_replay_on() { return kReplay.get() != 0; }

GpuOps::GpuOps(std::shared_ptr<gpu::Device> device) : device_(std::move(device)) {
    dummy_ = device_->alloc(16, "unused binding");
    // rope_store and attention add a position base read from memory (a replayed recording's);
    // calls that pass theirs in arguments bind this one.
    const uint32_t zero = 0;
    zero_base_ = device_->alloc(sizeof(zero), "position base 0");
    device_->upload(*zero_base_, 0, &zero, sizeof(zero));
    coopmat_ = device_->info().coopmat_khr;
}

void GpuOps::linear(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer* bias, gpu::Buffer& x,
                    uint32_t x_off, uint32_t x_stride, gpu::Buffer& y, uint32_t y_off,
                    uint32_t y_stride, int64_t n, bool accumulate,
                    const gpu::ProjectionInput& in) {
    gpu::project(e, m, x, x_off, x_stride, y, y_off, y_stride, n, accumulate, *dummy_, coopmat_,
                 in);
    if (bias) {
        // As pocket::linear: the product first, then the bias added to it.
        e.barrier();
        add_scale(e, y, y_off, y_stride, *bias, 0, 0, m.rows, n);
    }
}

void GpuOps::linear_gated(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer& x,
                          uint32_t x_off, uint32_t in_mode, gpu::Buffer& y, uint32_t y_off,
                          gpu::Buffer& aux, uint32_t bias_off, uint32_t gate_off) {
    if (in_mode != GK_MM_IN_PLAIN && in_mode != GK_MM_IN_SILU && in_mode != GK_MM_IN_GELU)
        throw ShapeError("pocket GPU gated residual: input mode " + std::to_string(in_mode) +
                         " reads the aux offsets the gated output stage takes");
    // project() knows plain and accumulating stores only: the matrix-vector stamp, split by
    // split, with the gated one.
    const gpu::StampInfo& st = pocket_stamp("matvec_" + m.format);
    for (const DeviceMatrix::Split& sp : m.splits) {
        gk::matvec a{};
        a.rows = u32(sp.rows);
        a.cols = u32(m.cols);
        a.n_tok = 1;
        a.x_off = x_off;
        a.x_stride = u32(m.cols);
        a.y_off = y_off + u32(sp.row0);
        a.y_stride = u32(m.rows);
        a.accumulate = GK_MM_ACCUMULATE_GATED;
        a.in_mode = in_mode;
        a.aux_off = (bias_off + u32(sp.row0)) | ((gate_off + u32(sp.row0)) << 16);
        a.eps = 0.0f;
        e.dispatch(st, {sp.buffer.get(), &x, &y, &aux}, a, ceil_div(sp.rows, GK_MATVEC_ROWS));
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
                  int64_t width, int64_t n_rows, gpu::Buffer* bias) {
    gk::rows a{};
    a.width = u32(width);
    a.rows = u32(n_rows);
    a.src_off = src_off;
    a.src_stride = src_stride;
    a.dst_off = dst_off;
    a.dst_stride = dst_stride;
    a.bias_off = 0;
    a.has_bias = bias ? 1u : 0u;
    e.dispatch(pocket_stamp(std::string("rows_") + op), {&src, &dst, bias ? bias : dummy_.get()}, a,
               grid(width * n_rows, kStrideGroup));
}

void GpuOps::add_scale(gpu::Encoder& e, gpu::Buffer& y, uint32_t y_off, uint32_t y_stride,
                       gpu::Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t width,
                       int64_t n_rows, gpu::Buffer* s, uint32_t s_off, float div,
                       gpu::Buffer* bias) {
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
    a.has_bias = bias ? 1u : 0u;
    e.dispatch(pocket_stamp("add_scale"),
               {&y, &x, s ? s : dummy_.get(), bias ? bias : dummy_.get()}, a,
               grid(width * n_rows, kStrideGroup));
}

void GpuOps::rope_store(gpu::Encoder& e, gpu::Buffer& qkv, uint32_t qkv_stride, int64_t n,
                        int64_t n_head, int64_t n_head_kv, int64_t head_dim, gpu::Buffer& freqs,
                        gpu::Buffer& kc, gpu::Buffer& vc, int64_t pos0, gpu::Buffer* pos_base,
                        gpu::Buffer* rows, uint32_t rows_off, uint32_t rows_v_off) {
    // pocket::TransformerRunner rotates pairs (2i, 2i + 1) of the whole head (cpu::rope, NORM).
    gk::rope_store_f32 a{};
    a.n_tok = u32(n);
    a.n_head = u32(n_head);
    a.n_head_kv = u32(n_head_kv);
    a.head_dim = u32(head_dim);
    a.pos0 = u32(pos0);
    a.qkv_off = 0;
    a.qkv_stride = qkv_stride;
    a.store_rows = rows ? 1u : 0u;
    a.rows_off = rows_off;
    a.rows_v_off = rows_v_off;
    e.dispatch(pocket_stamp("rope_store_f32"),
               {&qkv, &freqs, pos_base ? pos_base : zero_base_.get(), &kc, &vc,
                rows ? rows : dummy_.get()},
               a, grid(n * (n_head + 2 * n_head_kv) * head_dim / 2, kStrideGroup));
}

void GpuOps::attention(gpu::Encoder& e, gpu::Buffer& q, uint32_t q_stride, gpu::Buffer& kc,
                       gpu::Buffer& vc, uint32_t kv_stride, gpu::Buffer& out, uint32_t out_stride,
                       int64_t n_tok, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                       int64_t pos0, int64_t window, float scale, gpu::Buffer* pos_base) {
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
    e.dispatch(pocket_stamp("attention_f32"),
               {&q, &kc, &vc, &out, pos_base ? pos_base : zero_base_.get()}, a, u32(n_head),
               u32(n_tok));
}

void GpuOps::attention_step(gpu::Encoder& e, gpu::Buffer& qkv, gpu::Buffer& freqs,
                            gpu::Buffer& kc, gpu::Buffer& vc, gpu::Buffer& out, int64_t n_head,
                            int64_t n_head_kv, int64_t head_dim, int64_t pos0, int64_t window,
                            float scale, gpu::Buffer* pos_base, gpu::Buffer* rows,
                            uint32_t rows_off, uint32_t rows_v_off) {
    gk::attention_step_f32 a{};
    a.n_head = u32(n_head);
    a.n_head_kv = u32(n_head_kv);
    a.head_dim = u32(head_dim);
    a.pos0 = u32(pos0);
    a.window = u32(window);
    a.qkv_off = 0;
    a.out_off = 0;
    a.store_rows = rows ? 1u : 0u;
    a.rows_off = rows_off;
    a.rows_v_off = rows_v_off;
    a.scale = scale;
    e.dispatch(pocket_stamp("attention_step_f32"),
               {&qkv, &freqs, pos_base ? pos_base : zero_base_.get(), &kc, &vc, &out,
                rows ? rows : dummy_.get()},
               a, u32(n_head));
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
    ++generation_;
    h_ = dev.alloc(N * size_t(c.d_model) * F, "tf.h");
    qkv_ = dev.alloc(N * size_t(c.num_heads * c.head_dim + 2 * kv_width()) * F, "tf.qkv");
    attn_ = dev.alloc(N * size_t(c.num_heads * c.head_dim) * F, "tf.attn");
    out_ = dev.alloc(N * size_t(c.d_model) * F, "tf.out");
    ff_ = dev.alloc(N * size_t(c.ffn_dim) * F, "tf.ff");
    const int64_t widest = std::max({c.d_model, c.num_heads * c.head_dim, c.ffn_dim});
    panel_ = dev.alloc((N * size_t(widest) * 2 + 15) / 16 * 16, "tf.staged_panel");
    rows_ = n;
}

bool GpuTransformer::staged(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer& x,
                            uint32_t x_stride, int64_t n, const gpu::ProjectionInput& in,
                            gpu::Buffer& y, uint32_t y_stride, bool accumulate) {
    if (!panel_ || !gpu::staged_panel(m.format, m.cols, n, in.mode, ops_.coopmat())) return false;
    gpu::stage_input(e, x, 0, x_stride, m.cols, n, in, *panel_, ops_.dummy());
    e.barrier();
    gpu::project_staged(e, m, *panel_, y, 0, y_stride, n, accumulate, ops_.dummy());
    return true;
}

bool GpuTransformer::reserve_cache(int64_t n_ctx) {
    if (n_ctx <= capacity_) return false;
    gpu::Device& dev = ops_.device();
    ++generation_;
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
                            bool kv_only_last, const TransformerRecordOptions& opt) {
    if (n > rows_ || pos0 + n > capacity_)
        throw ShapeError("pocket GPU transformer: " + std::to_string(n) + " rows at position " +
                         std::to_string(pos0) + " exceed its buffers (" + std::to_string(rows_) +
                         " rows, " + std::to_string(capacity_) + " positions)");
    const TransformerConfig& c = w_.cfg;
    const int64_t D = c.d_model, hd = c.head_dim, kvw = kv_width();
    const uint32_t qw = uint32_t(c.num_heads * hd), ud = uint32_t(D);
    const uint32_t uqkv = uint32_t(qw + 2 * kvw);
    const float scale = float(1.0 / std::sqrt(double(hd)));
    // Up to vulkan.project.matvec_max_tokens rows take the matrix-vector stamps (gpu/matrix.h),
    // whose input stage computes the LayerNorm: no pass of its own. (The tiled stamps compute
    // only RMSNorm statistics.)
    const bool fuse_norm = n <= tuning::get("vulkan.project.matvec_max_tokens");
    const float eps = float(c.norm_eps);
    const gpu::ProjectionInput gelu{GK_MM_IN_GELU, nullptr, 0, 0.0f};
    const int n_layers = int(w_.layers.size());
    for (int il = 0; il < n_layers; ++il) {
        const DeviceTransformerLayer& l = w_.layers[size_t(il)];
        const bool kv_only = kv_only_last && il == n_layers - 1;
        const gpu::ProjectionInput norm1{GK_MM_IN_LAYERNORM + 1u, l.norm1_wb.get(), 0, eps};
        if (fuse_norm) {
            ops_.linear(e, l.wqkv, nullptr, x, 0, ud, *qkv_, 0, uqkv, n, false, norm1);
        } else if (!staged(e, l.wqkv, x, ud, n, norm1, *qkv_, uqkv, false)) {
            ops_.layernorm(e, x, 0, l.norm1_w.get(), l.norm1_b.get(), n, D, c.norm_eps, *h_, 0);
            e.barrier();
            ops_.linear(e, l.wqkv, nullptr, *h_, 0, ud, *qkv_, 0, uqkv, n);
        }
        e.barrier();
        const uint32_t rows_k = opt.rows_off + uint32_t(2 * il) * opt.rows_stride;
        if (n == 1 && !kv_only) {
            // One row: its rotation and cache store in the attention's dispatch.
            ops_.attention_step(e, *qkv_, *w_.rope_freqs, *kc_[size_t(il)], *vc_[size_t(il)],
                                *attn_, c.num_heads, c.num_kv_heads, hd, pos0, c.context, scale,
                                opt.pos_base, opt.rows, rows_k, opt.rows_stride);
        } else {
            ops_.rope_store(e, *qkv_, uqkv, n, c.num_heads, c.num_kv_heads, hd, *w_.rope_freqs,
                            *kc_[size_t(il)], *vc_[size_t(il)], pos0, opt.pos_base, opt.rows,
                            rows_k, opt.rows_stride);
            e.barrier();
            if (kv_only) break;
            ops_.attention(e, *qkv_, uqkv, *kc_[size_t(il)], *vc_[size_t(il)], uint32_t(kvw),
                           *attn_, qw, n, c.num_heads, c.num_kv_heads, hd, pos0, c.context, scale,
                           opt.pos_base);
        }
        e.barrier();
        // Residual branches: straight into x, or through the layer scale (Mimi).
        const gpu::ProjectionInput plain{};
        if (l.attn_scale) {
            if (!staged(e, l.wo, *attn_, qw, n, plain, *out_, ud, false))
                ops_.linear(e, l.wo, nullptr, *attn_, 0, qw, *out_, 0, ud, n);
            e.barrier();
            ops_.add_scale(e, x, 0, ud, *out_, 0, ud, D, n, l.attn_scale.get());
        } else if (!staged(e, l.wo, *attn_, qw, n, plain, x, ud, true)) {
            ops_.linear(e, l.wo, nullptr, *attn_, 0, qw, x, 0, ud, n, true);
        }
        e.barrier();
        const uint32_t ff = uint32_t(c.ffn_dim);
        const gpu::ProjectionInput norm2{GK_MM_IN_LAYERNORM + 1u, l.norm2_wb.get(), 0, eps};
        if (fuse_norm) {
            ops_.linear(e, l.up, nullptr, x, 0, ud, *ff_, 0, ff, n, false, norm2);
        } else if (!staged(e, l.up, x, ud, n, norm2, *ff_, ff, false)) {
            ops_.layernorm(e, x, 0, l.norm2_w.get(), l.norm2_b.get(), n, D, c.norm_eps, *h_, 0);
            e.barrier();
            ops_.linear(e, l.up, nullptr, *h_, 0, ud, *ff_, 0, ff, n);
        }
        e.barrier();
        // The GELU in the down projection's input stage.
        if (l.ffn_scale) {
            if (!staged(e, l.down, *ff_, ff, n, gelu, *out_, ud, false))
                ops_.linear(e, l.down, nullptr, *ff_, 0, ff, *out_, 0, ud, n, false, gelu);
            e.barrier();
            ops_.add_scale(e, x, 0, ud, *out_, 0, ud, D, n, l.ffn_scale.get());
        } else if (!staged(e, l.down, *ff_, ff, n, gelu, x, ud, true)) {
            ops_.linear(e, l.down, nullptr, *ff_, 0, ff, x, 0, ud, n, true, gelu);
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
