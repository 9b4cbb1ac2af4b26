// The frames seat's work on the device: for a batch of frames recorded into one command
// buffer, each frame's backbone step (lm.input, the transformer over one row, out_norm,
// z_proj) and its flow head (the conditioning's embedding, then per Euler step the time
// embedding's mean, the input projection, the adaLN residual blocks and the final layer), the
// frame's latent feeding the next frame's step. The host supplies the first input latent and
// each frame's starting noise, and reads back every frame's conditioning and latent (the EOS
// logits are formed from the conditioning on the host, as the CPU chain forms them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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
    // [n, Z] and latents [n, L], and keeps the batch's K/V rows for kv_rows(). Returns the
    // dispatches recorded. Throws DeviceError.
    uint64_t run(int64_t n, int64_t pos0, const float* latent_in, const float* x0,
                 int64_t steps, const std::vector<float>& tsum, float* cond, float* latents);
    // The last batch's K (which 0) or V (1) rows of one layer, [n][kv_width], read back with it.
    const float* kv_rows(int layer, int which) const;

private:
    void flow_head(gpu::Encoder& e, int64_t frame, int64_t steps);

    GpuOps& ops_;
    const PocketConfig& c_;
    const DeviceBackbone& w_;
    GpuTransformer& lm_;
    int64_t batch_ = 0, tsum_steps_ = -1, last_n_ = 0;
    std::vector<float> kv_;
    std::unique_ptr<gpu::Buffer> lat_, x_, zh_, cond_, cy_, sy_, xw_, ada_, h_, m_, v_, tsum_;
    std::unique_ptr<gpu::Buffer> host_out_;
};

}  // namespace dasllama::pocket
