#include "tts/pocket/gpu_frames.h"

#include <cstring>

#include "core/errors.h"

namespace dasllama::pocket {

GpuFrames::GpuFrames(GpuOps& ops, const PocketConfig& c, const DeviceBackbone& w,
                     GpuTransformer& lm)
    : ops_(ops), c_(c), w_(w), lm_(lm) {
    gpu::Device& dev = ops_.device();
    const size_t W = size_t(c.flow_dim), F = sizeof(float);
    x_ = dev.alloc(size_t(c.lm.d_model) * F, "frames.x");
    zh_ = dev.alloc(size_t(c.lm.d_model) * F, "frames.out_norm");
    cy_ = dev.alloc(W * F, "flow.cond_y");
    sy_ = dev.alloc(W * F, "flow.silu_y");
    xw_ = dev.alloc(W * F, "flow.x");
    ada_ = dev.alloc(3 * W * F, "flow.ada");
    h_ = dev.alloc(W * F, "flow.h");
    m_ = dev.alloc(W * F, "flow.m");
    v_ = dev.alloc(size_t(c.latent_dim) * F, "flow.v");
    lm_.reserve_rows(1);
}

void GpuFrames::reserve(int64_t n) {
    if (n <= batch_) return;
    gpu::Device& dev = ops_.device();
    const size_t F = sizeof(float), L = size_t(c_.latent_dim), Z = size_t(c_.cond_dim());
    lat_ = dev.alloc(size_t(n + 1) * L * F, "frames.latents");
    cond_ = dev.alloc(size_t(n) * Z * F, "frames.cond");
    const size_t kv = size_t(2 * c_.lm.num_layers * lm_.kv_width());
    host_out_ = dev.alloc_host(size_t(n) * (Z + L + kv) * F, "frames.readback");
    batch_ = n;
}

void GpuFrames::flow_head(gpu::Encoder& e, int64_t frame, int64_t steps) {
    const int64_t W = c_.flow_dim, L = c_.latent_dim, Z = c_.cond_dim();
    const uint32_t uw = uint32_t(W), lat_off = uint32_t((frame + 1) * L);
    ops_.linear(e, w_.cond.w, w_.cond.bias.get(), *cond_, uint32_t(frame * Z), uint32_t(Z), *cy_,
                0, uw, 1);
    e.barrier();
    for (int64_t i = 0; i < steps; ++i) {
        // sy = SiLU(cond_y + mean time embedding of step i); x = input(latent).
        ops_.rows(e, "copy", *cy_, 0, uw, *sy_, 0, uw, W, 1);
        ops_.linear(e, w_.flow_input.w, w_.flow_input.bias.get(), *lat_, lat_off, uint32_t(L),
                    *xw_, 0, uw, 1);
        e.barrier();
        ops_.add_scale(e, *sy_, 0, uw, *tsum_, uint32_t(i * W), uw, W, 1);
        e.barrier();
        ops_.rows(e, "silu", *sy_, 0, uw, *sy_, 0, uw, W, 1);
        e.barrier();
        for (const DeviceFlowBlock& b : w_.blocks) {
            ops_.linear(e, b.ada.w, b.ada.bias.get(), *sy_, 0, uw, *ada_, 0, 3 * uw, 1);
            e.barrier();
            ops_.layernorm(e, *xw_, 0, b.norm_w.get(), b.norm_b.get(), 1, W, c_.flow_norm_eps,
                           *h_, 0, ada_.get(), 0);
            e.barrier();
            ops_.linear(e, b.mlp_in.w, b.mlp_in.bias.get(), *h_, 0, uw, *m_, 0, uw, 1);
            e.barrier();
            ops_.rows(e, "silu", *m_, 0, uw, *m_, 0, uw, W, 1);
            e.barrier();
            ops_.linear(e, b.mlp_out.w, b.mlp_out.bias.get(), *m_, 0, uw, *h_, 0, uw, 1);
            e.barrier();
            ops_.add_scale(e, *xw_, 0, uw, *h_, 0, uw, W, 1, ada_.get(), 2 * uw);  // x += gate h
            e.barrier();
        }
        ops_.linear(e, w_.final_ada.w, w_.final_ada.bias.get(), *sy_, 0, uw, *ada_, 0, 2 * uw, 1);
        e.barrier();
        ops_.layernorm(e, *xw_, 0, nullptr, nullptr, 1, W, c_.flow_norm_eps, *h_, 0, ada_.get(), 0);
        e.barrier();
        ops_.linear(e, w_.final_out.w, w_.final_out.bias.get(), *h_, 0, uw, *v_, 0, uint32_t(L), 1);
        e.barrier();
        ops_.add_scale(e, *lat_, lat_off, uint32_t(L), *v_, 0, uint32_t(L), L, 1, nullptr, 0,
                       float(steps));
        e.barrier();
    }
}

uint64_t GpuFrames::run(int64_t n, int64_t pos0, const float* latent_in, const float* x0,
                        int64_t steps, const std::vector<float>& tsum, float* cond,
                        float* latents) {
    if (n > batch_) throw ShapeError("pocket GPU frames: a batch of " + std::to_string(n) +
                                     " frames exceeds the reserved " + std::to_string(batch_));
    gpu::Device& dev = ops_.device();
    const int64_t D = c_.lm.d_model, L = c_.latent_dim, Z = c_.cond_dim();
    const size_t F = sizeof(float);
    if (steps != tsum_steps_) {
        tsum_ = dev.alloc(tsum.size() * F, "flow.time_sums");
        dev.upload(*tsum_, 0, tsum.data(), tsum.size() * F);
        tsum_steps_ = steps;
    }
    {
        std::vector<float> init(size_t((n + 1) * L));
        std::memcpy(init.data(), latent_in, size_t(L) * F);
        std::memcpy(init.data() + L, x0, size_t(n * L) * F);
        dev.upload(*lat_, 0, init.data(), init.size() * F);
    }
    std::unique_ptr<gpu::Encoder> enc = dev.encoder();
    gpu::Encoder& e = *enc;
    const uint32_t ud = uint32_t(D);
    for (int64_t j = 0; j < n; ++j) {
        ops_.linear(e, w_.input, nullptr, *lat_, uint32_t(j * L), uint32_t(L), *x_, 0, ud, 1);
        e.barrier();
        lm_.record(e, *x_, 1, pos0 + j, false);
        gpu::Buffer& normed = w_.has_z_proj ? *zh_ : *cond_;
        ops_.layernorm(e, *x_, 0, w_.out_norm_w.get(), w_.out_norm_b.get(), 1, D, c_.lm.norm_eps,
                       normed, w_.has_z_proj ? 0u : uint32_t(j * Z));
        e.barrier();
        if (w_.has_z_proj) {
            ops_.linear(e, w_.z_proj, nullptr, *zh_, 0, ud, *cond_, uint32_t(j * Z), uint32_t(Z), 1);
            e.barrier();
        }
        flow_head(e, j, steps);
    }
    e.copy(*cond_, 0, *host_out_, 0, size_t(n * Z) * F);
    e.copy(*lat_, size_t(L) * F, *host_out_, size_t(n * Z) * F, size_t(n * L) * F);
    // The batch's K/V rows come back with it, so the host state never lags the device.
    const size_t rows_bytes = size_t(n * lm_.kv_width()) * F;
    size_t at = size_t(n * (Z + L)) * F;
    for (int il = 0; il < int(c_.lm.num_layers); ++il) {
        for (int which = 0; which < 2; ++which, at += rows_bytes)
            e.copy(lm_.cache(il, which), size_t(pos0 * lm_.kv_width()) * F, *host_out_, at,
                   rows_bytes);
    }
    dev.submit(e);
    const float* out = static_cast<const float*>(host_out_->mapped());
    std::memcpy(cond, out, size_t(n * Z) * F);
    std::memcpy(latents, out + n * Z, size_t(n * L) * F);
    kv_.assign(out + n * (Z + L), out + n * (Z + L) + 2 * c_.lm.num_layers * n * lm_.kv_width());
    last_n_ = n;
    return e.dispatches();
}

const float* GpuFrames::kv_rows(int layer, int which) const {
    return kv_.data() + size_t((2 * layer + which) * last_n_ * lm_.kv_width());
}

}  // namespace dasllama::pocket
