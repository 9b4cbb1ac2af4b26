// The frames seat's work on the device: for a batch of frames recorded into one command
// buffer, each frame's backbone step (lm.input, the transformer over one row, out_norm,
// z_proj) and its flow head (the conditioning's embedding, then per Euler step the adaLN
// linears of every block at once, the input projection, the residual blocks and the final
// layer), the frame's latent feeding the next frame's step. The host supplies the first input
// latent and each frame's starting noise, and reads back every frame's conditioning and latent
// (the EOS logits are formed from the conditioning on the host, as the CPU chain forms them).
//
// Fewer dispatches: LayerNorms, adaLN modulation and activations run in the input stage of the
// projection that follows them (shaders/kernels/mm_input.h); biases are copied into the
// outputs before the products, which then add to them (b + Wx rounds as Wx + b). The first
// Euler step's input projection reads only the frame's starting latent, which the host
// supplies, so one product at the batch's start makes it for every frame of the batch (each
// frame's flow head then works in its own row of xw_).
//
// Replay: a batch's command buffer reads its positions from a mapped buffer (the batch's first
// position) and touches only buffers of fixed places, so it is recorded once per (frames,
// Euler steps) and submitted again for later batches (the knob vulkan.pocket.replay).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "tts/pocket/config.h"
#include "tts/pocket/gpu_ops.h"
#include "tts/pocket/gpu_weights.h"

namespace dasllama::pocket {

class GpuFrames {
public:
    GpuFrames(GpuOps& ops, const PocketConfig& c, const DeviceBackbone& w, GpuTransformer& lm);

    // Buffers for batches of up to n frames. Call between submissions.
    void reserve(int64_t n);

    // n frames at positions pos0.. (the device cache holds [0, pos0)). latent_in [L]: the
    // first frame's input; x0 [n, L]: each frame's starting latent (sqrt(temperature) * noise,
    // or zeros); tsum [steps, W]: the mean time embedding of each Euler step. Writes cond
    // [n, Z] and latents [n, L], and keeps the batch's K/V rows for kv_rows(). Throws
    // DeviceError.
    GpuRun run(int64_t n, int64_t pos0, const float* latent_in, const float* x0,
               int64_t steps, const std::vector<float>& tsum, float* cond, float* latents);
    // The last batch's K (which 0) or V (1) rows of one layer, [n][kv_width], read back with it.
    const float* kv_rows(int layer, int which) const;

private:
    void record_batch(gpu::Encoder& e, int64_t n, int64_t steps);
    void flow_head(gpu::Encoder& e, int64_t frame, int64_t steps);
    // Copies the biases into the outputs the flow head's products add to (`cond`: the
    // conditioning's embedding too, once a frame; xw_row >= 0: the input projection's, into
    // that frame's row of xw_).
    void prefill(gpu::Encoder& e, bool cond, int64_t xw_row);

    GpuOps& ops_;
    const PocketConfig& c_;
    const DeviceBackbone& w_;
    GpuTransformer& lm_;
    int64_t batch_ = 0, tsum_steps_ = -1, last_n_ = 0;
    std::vector<float> kv_;
    // Element offsets: in bias_, of each output's biases; in aux_, of the adaLN outputs.
    // In aux_, also of the mlp_out biases (the gated residual's).
    int64_t b_cy_ = 0, b_xw_ = 0, b_m_ = 0, b_v_ = 0, b_ada_ = 0, ada_off_ = 0;
    int64_t out_bias_off_ = 0;
    int64_t ada_rows_ = 0;
    // Mapped (host-visible): lat_in_ (the batch's inputs), host_out_ (its outputs), pos_base_.
    std::unique_ptr<gpu::Buffer> lat_, lat_in_, x_, cond_, tsum_, kv_rows_, host_out_, pos_base_;
    // The flow head: activations (each its own buffer: no dispatch reads and writes one
    // buffer; xw_ has a row per frame of the batch), aux_ = [every block's norm weight |
    // bias][the adaLN outputs][the mlp_out biases], the bias images.
    std::unique_ptr<gpu::Buffer> cy_, xw_, m_, v_, aux_, bias_;
    // Recorded batches by (frames, Euler steps), valid while the transformer's buffers are
    // those of lm_generation_ and the knobs those of knobs_generation_.
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<gpu::Encoder>> recorded_;
    uint64_t lm_generation_ = 0, knobs_generation_ = 0;
};

}  // namespace dasllama::pocket
