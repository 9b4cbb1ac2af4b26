#include "tts/pocket/gpu_frames.h"

#include <cstring>

#include "core/errors.h"
#include "core/tuning.h"
#include "gk_args.h"

namespace dasllama::pocket {

namespace {

// The packed aux offsets of the LayerNorm input stage: affine [weight | bias] at wb, adaLN
// [shift | scale] at md (shaders/kernels/mm_input.h; pocket_weights_unsupported checks they fit).
uint32_t ln_offsets(int64_t wb, int64_t md) { return uint32_t(wb) | (uint32_t(md) << 16); }

}  // namespace

GpuFrames::GpuFrames(GpuOps& ops, const PocketConfig& c, const DeviceBackbone& w,
                     GpuTransformer& lm)
    : ops_(ops), c_(c), w_(w), lm_(lm) {
    gpu::Device& dev = ops_.device();
    const int64_t W = c.flow_dim, L = c.latent_dim, B = int64_t(w.blocks.size());
    const size_t F = sizeof(float);
    x_ = dev.alloc(size_t(c.lm.d_model) * F, "frames.x");
    cy_ = dev.alloc(size_t(W) * F, "flow.cond_y");
    m_ = dev.alloc(size_t(B * W) * F, "flow.mlp_in");
    v_ = dev.alloc(size_t(L) * F, "flow.v");
    ada_rows_ = w.ada_all.w.rows;
    ada_off_ = 2 * B * W;
    out_bias_off_ = ada_off_ + ada_rows_;
    aux_ = dev.alloc(size_t(out_bias_off_ + B * W) * F, "flow.aux");
    pos_base_ = dev.alloc_host(sizeof(uint32_t), "frames.position");
    b_cy_ = 0;
    b_xw_ = W;
    b_m_ = 2 * W;
    b_v_ = b_m_ + B * W;
    b_ada_ = b_v_ + L;
    bias_ = dev.alloc(size_t(b_ada_ + ada_rows_) * F, "flow.bias_images");
    // The bias images (zeros where a linear has none), and aux_'s constant parts: the norms
    // and the mlp_out biases (zeros where none).
    std::unique_ptr<gpu::Encoder> enc = dev.encoder();
    gpu::Encoder& e = *enc;
    e.fill(*bias_, 0, bias_->size(), 0u);
    e.fill(*aux_, 0, aux_->size(), 0u);
    e.barrier();
    auto put = [&](const DeviceLinear& l, int64_t at, gpu::Buffer& to) {
        if (l.bias) e.copy(*l.bias, 0, to, size_t(at) * F, size_t(l.w.rows) * F);
    };
    put(w.cond, b_cy_, *bias_);
    put(w.flow_input, b_xw_, *bias_);
    for (int64_t b = 0; b < B; ++b) {
        put(w.blocks[size_t(b)].mlp_in, b_m_ + b * W, *bias_);
        put(w.blocks[size_t(b)].mlp_out, out_bias_off_ + b * W, *aux_);
    }
    put(w.final_out, b_v_, *bias_);
    put(w.ada_all, b_ada_, *bias_);
    if (B) e.copy(*w.flow_norm_wb, 0, *aux_, 0, size_t(2 * B * W) * F);
    dev.submit(e);
    lm_.reserve_rows(1);
}

void GpuFrames::reserve(int64_t n) {
    if (n <= batch_) return;
    gpu::Device& dev = ops_.device();
    const size_t F = sizeof(float), L = size_t(c_.latent_dim), Z = size_t(c_.cond_dim());
    const size_t kv = size_t(2 * c_.lm.num_layers * lm_.kv_width());
    recorded_.clear();
    lat_ = dev.alloc(size_t(n + 1) * L * F, "frames.latents");
    lat_in_ = dev.alloc_host(size_t(n + 1) * L * F, "frames.latents_in");
    cond_ = dev.alloc(size_t(n) * Z * F, "frames.cond");
    xw_ = dev.alloc(size_t(n * c_.flow_dim) * F, "flow.x");
    kv_rows_ = dev.alloc(size_t(n) * kv * F, "frames.kv_rows");
    host_out_ = dev.alloc_host(size_t(n) * (Z + L + kv) * F, "frames.readback");
    batch_ = n;
}

void GpuFrames::prefill(gpu::Encoder& e, bool cond, int64_t xw_row) {
    const size_t F = sizeof(float);
    const int64_t W = c_.flow_dim, B = int64_t(w_.blocks.size());
    if (cond) e.copy(*bias_, size_t(b_cy_) * F, *cy_, 0, size_t(W) * F);
    if (xw_row >= 0)
        e.copy(*bias_, size_t(b_xw_) * F, *xw_, size_t(xw_row * W) * F, size_t(W) * F);
    if (B) e.copy(*bias_, size_t(b_m_) * F, *m_, 0, size_t(B * W) * F);
    e.copy(*bias_, size_t(b_v_) * F, *v_, 0, size_t(c_.latent_dim) * F);
    e.copy(*bias_, size_t(b_ada_) * F, *aux_, size_t(ada_off_) * F, size_t(ada_rows_) * F);
}

void GpuFrames::flow_head(gpu::Encoder& e, int64_t frame, int64_t steps) {
    const int64_t W = c_.flow_dim, L = c_.latent_dim, Z = c_.cond_dim();
    const int64_t B = int64_t(w_.blocks.size());
    const uint32_t uw = uint32_t(W), ul = uint32_t(L), lat_off = uint32_t((frame + 1) * L);
    const uint32_t x_row = uint32_t(frame * W);  // this frame's row of xw_
    const float eps = float(c_.flow_norm_eps);
    for (int64_t i = 0; i < steps; ++i) {
        if (i > 0) {
            prefill(e, false, frame);
            e.barrier();
        }
        // cond_y = cond(conditioning) (once a frame); x = input(latent) (the first step's: made
        // for the whole batch by record_batch).
        if (i == 0)
            ops_.linear(e, w_.cond.w, nullptr, *cond_, uint32_t(frame * Z), uint32_t(Z), *cy_, 0,
                        uw, 1, true);
        else
            ops_.linear(e, w_.flow_input.w, nullptr, *lat_, lat_off, ul, *xw_, x_row, uw, 1, true);
        e.barrier();
        // Every block's shift | scale | gate and the final layer's shift | scale, from
        // SiLU(cond_y + the step's mean time embedding).
        ops_.linear(e, w_.ada_all.w, nullptr, *cy_, 0, uw, *aux_, uint32_t(ada_off_),
                    uint32_t(ada_rows_), 1, true,
                    {GK_MM_IN_SILU_SUM, tsum_.get(), uint32_t(i * W), 0.0f});
        e.barrier();
        for (int64_t b = 0; b < B; ++b) {
            const DeviceFlowBlock& blk = w_.blocks[size_t(b)];
            const int64_t ada = ada_off_ + 3 * b * W;
            // m = mlp_in(adaLN(LayerNorm(x))); x += gate mlp_out(SiLU(m)).
            ops_.linear(e, blk.mlp_in.w, nullptr, *xw_, x_row, uw, *m_, uint32_t(b * W), uw, 1,
                        true,
                        {GK_MM_IN_LAYERNORM + 3u, aux_.get(), ln_offsets(2 * b * W, ada), eps});
            e.barrier();
            ops_.linear_gated(e, blk.mlp_out.w, *m_, uint32_t(b * W), GK_MM_IN_SILU, *xw_, x_row,
                              *aux_, uint32_t(out_bias_off_ + b * W), uint32_t(ada + 2 * W));
            e.barrier();
        }
        // v = final_out(adaLN(LayerNorm(x))), no affine part; latent += v / steps.
        ops_.linear(e, w_.final_out.w, nullptr, *xw_, x_row, uw, *v_, 0, ul, 1, true,
                    {GK_MM_IN_LAYERNORM + 2u, aux_.get(), ln_offsets(0, ada_off_ + 3 * B * W),
                     eps});
        e.barrier();
        ops_.add_scale(e, *lat_, lat_off, ul, *v_, 0, ul, L, 1, nullptr, 0, float(steps));
        e.barrier();
    }
}

void GpuFrames::record_batch(gpu::Encoder& e, int64_t n, int64_t steps) {
    const int64_t D = c_.lm.d_model, L = c_.latent_dim, Z = c_.cond_dim();
    const uint32_t ud = uint32_t(D), kvw = uint32_t(lm_.kv_width());
    const size_t F = sizeof(float);
    // The batch's input latent and starting noise, written to mapped memory before each submit;
    // the first Euler step's x = input(starting latent) of every frame in one product.
    const int64_t W = c_.flow_dim;
    e.copy(*lat_in_, 0, *lat_, 0, size_t((n + 1) * L) * F);
    for (int64_t j = 0; j < n; ++j)
        e.copy(*bias_, size_t(b_xw_) * F, *xw_, size_t(j * W) * F, size_t(W) * F);
    e.barrier();
    ops_.linear(e, w_.flow_input.w, nullptr, *lat_, uint32_t(L), uint32_t(L), *xw_, 0,
                uint32_t(W), n, true);
    e.barrier();
    for (int64_t j = 0; j < n; ++j) {
        // The flow head's bias images go in while the backbone runs (nothing reads them before
        // the barriers below).
        prefill(e, true, -1);
        ops_.linear(e, w_.input, nullptr, *lat_, uint32_t(j * L), uint32_t(L), *x_, 0, ud, 1);
        e.barrier();
        // Positions pos_base[0] + j; each layer's K/V rows also go to kv_rows_ [layer][k|v][n].
        lm_.record(e, *x_, 1, j, false,
                   {pos_base_.get(), kv_rows_.get(), uint32_t(j) * kvw, uint32_t(n) * kvw});
        if (w_.has_z_proj) {
            ops_.linear(e, w_.z_proj, nullptr, *x_, 0, ud, *cond_, uint32_t(j * Z), uint32_t(Z),
                        1, false,
                        {GK_MM_IN_LAYERNORM + 1u, w_.out_norm_wb.get(), 0, float(c_.lm.norm_eps)});
        } else {
            ops_.layernorm(e, *x_, 0, w_.out_norm_w.get(), w_.out_norm_b.get(), 1, D,
                           c_.lm.norm_eps, *cond_, uint32_t(j * Z));
        }
        e.barrier();
        flow_head(e, j, steps);
    }
    e.copy(*cond_, 0, *host_out_, 0, size_t(n * Z) * F);
    e.copy(*lat_, size_t(L) * F, *host_out_, size_t(n * Z) * F, size_t(n * L) * F);
    // The batch's K/V rows come back with it, so the host state never lags the device.
    e.copy(*kv_rows_, 0, *host_out_, size_t(n * (Z + L)) * F,
           size_t(2 * c_.lm.num_layers * n * lm_.kv_width()) * F);
}

GpuRun GpuFrames::run(int64_t n, int64_t pos0, const float* latent_in, const float* x0,
                         int64_t steps, const std::vector<float>& tsum, float* cond,
                         float* latents) {
    if (n > batch_) throw ShapeError("pocket GPU frames: a batch of " + std::to_string(n) +
                                     " frames exceeds the reserved " + std::to_string(batch_));
    if (pos0 + n > lm_.capacity())
        throw ShapeError("pocket GPU frames: frames at positions " + std::to_string(pos0) +
                         ".." + std::to_string(pos0 + n - 1) + " exceed the device cache (" +
                         std::to_string(lm_.capacity()) + " positions)");
    gpu::Device& dev = ops_.device();
    const int64_t L = c_.latent_dim, Z = c_.cond_dim();
    const size_t F = sizeof(float);
    if (steps != tsum_steps_) {
        recorded_.clear();
        tsum_ = dev.alloc(tsum.size() * F, "flow.time_sums");
        dev.upload(*tsum_, 0, tsum.data(), tsum.size() * F);
        tsum_steps_ = steps;
    }
    // A recording is stale once the transformer's buffers or any knob (the projections'
    // choice of stamps) changed.
    if (lm_.buffers_generation() != lm_generation_ || tuning::generation() != knobs_generation_) {
        recorded_.clear();
        lm_generation_ = lm_.buffers_generation();
        knobs_generation_ = tuning::generation();
    }
    float* lat_in = static_cast<float*>(lat_in_->mapped());
    std::memcpy(lat_in, latent_in, size_t(L) * F);
    std::memcpy(lat_in + L, x0, size_t(n * L) * F);
    *static_cast<uint32_t*>(pos_base_->mapped()) = uint32_t(pos0);
    GpuRun r;
    const bool replay = pocket_replay_on();
    auto it = recorded_.find({n, steps});
    gpu::Encoder* enc = nullptr;
    std::unique_ptr<gpu::Encoder> once;
    if (replay && it != recorded_.end()) {
        enc = it->second.get();
        r.replays = 1;
    } else {
        once = dev.encoder();
        record_batch(*once, n, steps);
        enc = once.get();
    }
    dev.submit(*enc);
    r.dispatches = enc->dispatches();
    if (replay && once) recorded_[{n, steps}] = std::move(once);
    const float* out = static_cast<const float*>(host_out_->mapped());
    std::memcpy(cond, out, size_t(n * Z) * F);
    std::memcpy(latents, out + n * Z, size_t(n * L) * F);
    kv_.assign(out + n * (Z + L), out + n * (Z + L) + 2 * c_.lm.num_layers * n * lm_.kv_width());
    last_n_ = n;
    return r;
}

const float* GpuFrames::kv_rows(int layer, int which) const {
    return kv_.data() + size_t((2 * layer + which) * last_n_ * lm_.kv_width());
}

}  // namespace dasllama::pocket
