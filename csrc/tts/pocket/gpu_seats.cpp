#include "tts/pocket/gpu_seats.h"

#include "core/errors.h"
#include "tts/pocket/gpu_admission.h"
#include "tts/pocket/gpu_frames.h"
#include "tts/pocket/gpu_ops.h"
#include "tts/pocket/gpu_weights.h"

namespace dasllama::pocket {

PocketGpu::PocketGpu(const PocketConfig& c, const PocketWeights& w, const std::string& spec)
    : c_(c), w_(w) {
    device_ = gpu::open_device(spec);  // throws DeviceError naming the devices there are
    for (const char* seat : {"prompt", "frames", "codec"}) {
        seats_[seat] = gpu::SeatStats{};
        on_[seat] = gpu::seat_enabled_by_env(seat);
    }
    absent_why_ = pocket_weights_unsupported(w);
    if (!absent_why_.empty()) {
        absent_ = gpu::Decline::shape;
        return;
    }
    try {
        ops_ = std::make_unique<GpuOps>(device_);
        backbone_ = std::make_unique<DeviceBackbone>(upload_backbone(*device_, c, w));
        lm_ = std::make_unique<GpuTransformer>(*ops_, backbone_->lm);
        frames_ = std::make_unique<GpuFrames>(*ops_, c, *backbone_, *lm_);
        frames_->reserve(kGpuFramesPerBatch);
    } catch (const DeviceError& e) {
        frames_.reset();
        lm_.reset();
        backbone_.reset();
        absent_ = gpu::Decline::memory;
        absent_why_ = e.what();
    }
}

PocketGpu::~PocketGpu() = default;

std::string PocketGpu::device_name() const { return device_->info().name; }

void PocketGpu::set_enabled(const std::string& seat, bool on) {
    if (!on_.count(seat))
        throw std::invalid_argument("no seat '" + seat + "' on this model (seats: prompt, "
                                    "frames, codec on a GPU device, none on the CPU)");
    on_[seat] = on;
}

bool PocketGpu::seat_open(const std::string& seat) {
    if (!on_[seat]) {
        seats_[seat].decline(gpu::Decline::knob);
        return false;
    }
    if (!frames_) {
        seats_[seat].decline(absent_);
        return false;
    }
    return true;
}

void PocketGpu::begin_chunk(KVCache& state, uint64_t generation) {
    resident_state_ = &state;
    resident_generation_ = generation;
    resident_rows_ = 0;
}

bool PocketGpu::admit_frames(const KVCache& state, int64_t n) {
    if (!seat_open("frames")) return false;
    if (!gpu_frames_unfit(c_, state.n_past(), n, state.n_ctx()).empty()) {
        seats_["frames"].decline(gpu::Decline::shape);
        return false;
    }
    try {
        // A grown cache starts empty: every row goes up again.
        if (lm_->reserve_cache(state.n_ctx())) resident_rows_ = 0;
    } catch (const DeviceError&) {
        seats_["frames"].decline(gpu::Decline::memory);
        return false;
    }
    return true;
}

void PocketGpu::run_frames(KVCache& state, uint64_t generation, int64_t n,
                           const float* latent_in, const float* x0, int64_t steps,
                           const std::vector<float>& tsum, float* cond, float* latents) {
    gpu::SeatStats& seat = seats_["frames"];
    // The record: rows [0, resident_rows_) of this chunk's state. Another state or chunk
    // (generation) makes it stale; then every row goes up.
    if (resident_state_ != &state || resident_generation_ != generation) {
        resident_state_ = &state;
        resident_generation_ = generation;
        resident_rows_ = 0;
    }
    const int64_t host = state.n_past();
    if (resident_rows_ > host) resident_rows_ = host;
    if (resident_rows_ < host) {
        const int64_t n_up = host - resident_rows_, kvw = lm_->kv_width();
        std::vector<float> k(size_t(n_up * kvw)), v(size_t(n_up * kvw));
        for (int il = 0; il < int(c_.lm.num_layers); ++il) {
            state.read_layer_rows(il, resident_rows_, n_up, k.data(), v.data());
            lm_->upload_rows(il, resident_rows_, n_up, k.data(), v.data());
        }
        seat.uploads += 1;
        resident_rows_ = host;
    }
    seat.dispatches += frames_->run(n, host, latent_in, x0, steps, tsum, cond, latents);
    seat.served += 1;
}

void PocketGpu::frames_kept(KVCache& state, int64_t kept) {
    const int64_t pos0 = state.n_past();
    for (int il = 0; il < int(c_.lm.num_layers); ++il)
        state.kv_cache_append_rows(il, pos0, kept, frames_->kv_rows(il, 0), frames_->kv_rows(il, 1));
    resident_rows_ = pos0 + kept;
}

}  // namespace dasllama::pocket
