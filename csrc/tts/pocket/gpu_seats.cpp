#include "tts/pocket/gpu_seats.h"

#include "core/errors.h"
#include "tts/pocket/gpu_admission.h"
#include "tts/pocket/gpu_codec.h"
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
        return;
    }
    // Mimi's decoder on its own: the frames seat serves without it.
    try {
        mimi_ = std::make_unique<DeviceMimi>(upload_mimi(*device_, c, w));
        codec_ = std::make_unique<GpuCodec>(*ops_, c, *mimi_);
    } catch (const DeviceError&) {
        codec_.reset();
        mimi_.reset();
        codec_absent_ = gpu::Decline::memory;
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
    if (seat == "codec" && !codec_) {
        seats_[seat].decline(codec_absent_);
        return false;
    }
    return true;
}

bool PocketGpu::admit_codec(int64_t positions, int64_t n) {
    if (!seat_open("codec")) return false;
    if (!gpu_codec_unfit(c_, positions, n).empty()) {
        seats_["codec"].decline(gpu::Decline::shape);
        return false;
    }
    return true;
}

void PocketGpu::codec_reset() {
    if (codec_) codec_->reset();
}

void PocketGpu::codec_decode(const float* latents, int64_t n, std::vector<float>& audio,
                             bool replay) {
    gpu::SeatStats& seat = seats_["codec"];
    if (replay) {
        // Rebuilding the stream's state from the host's latents: counted as an upload.
        std::vector<float> dropped;
        codec_->decode(latents, n, dropped);
        seat.uploads += 1;
        return;
    }
    const GpuRun r = codec_->decode(latents, n, audio);
    seat.dispatches += r.dispatches;
    seat.replays += r.replays > 0 ? 1 : 0;   // a call of several pieces counts once
    seat.served += 1;
}

void PocketGpu::begin_chunk(KVCache& state, uint64_t generation, int64_t keep,
                            uint64_t keep_id) {
    // The voice's rows [0, keep) are unchanged across its chunks, and no chunk writes below
    // its own first position, so the device copy keeps them while the record stays this
    // state's with the same base.
    const bool kept = keep > 0 && resident_state_ == &state && resident_base_ == keep_id &&
                      resident_rows_ >= keep;
    resident_state_ = &state;
    resident_generation_ = generation;
    resident_base_ = keep > 0 ? keep_id : generation;
    resident_rows_ = kept ? keep : 0;
}

bool PocketGpu::reserve_cache(const KVCache& state, const std::string& seat) {
    try {
        // A grown cache starts empty: every row goes up again.
        if (lm_->reserve_cache(state.n_ctx())) resident_rows_ = 0;
    } catch (const DeviceError&) {
        seats_[seat].decline(gpu::Decline::memory);
        return false;
    }
    return true;
}

bool PocketGpu::admit_frames(const KVCache& state, int64_t n) {
    if (!seat_open("frames")) return false;
    if (!gpu_frames_unfit(c_, state.n_past(), n, state.n_ctx()).empty()) {
        seats_["frames"].decline(gpu::Decline::shape);
        return false;
    }
    return reserve_cache(state, "frames");
}

bool PocketGpu::admit_prompt(const KVCache& state, int64_t n) {
    if (!seat_open("prompt")) return false;
    if (!gpu_prompt_unfit(c_, state.n_past(), n, state.n_ctx()).empty()) {
        seats_["prompt"].decline(gpu::Decline::shape);
        return false;
    }
    if (!reserve_cache(state, "prompt")) return false;
    try {
        lm_->reserve_rows(n);
        if (n > prompt_rows_) {
            const size_t F = sizeof(float);
            prompt_x_ = device_->alloc(size_t(n * c_.lm.d_model) * F, "prompt.rows");
            prompt_out_ = device_->alloc_host(
                size_t(2 * c_.lm.num_layers * n * lm_->kv_width()) * F, "prompt.kv_readback");
            prompt_rows_ = n;
        }
    } catch (const DeviceError&) {
        prompt_x_.reset();
        prompt_out_.reset();
        prompt_rows_ = 0;
        seats_["prompt"].decline(gpu::Decline::memory);
        return false;
    }
    return true;
}

void PocketGpu::run_prompt(KVCache& state, uint64_t generation, const float* rows, int64_t n) {
    gpu::SeatStats& seat = seats_["prompt"];
    sync_rows(state, generation, seat);
    const int64_t pos0 = state.n_past(), kvw = lm_->kv_width(), L = c_.lm.num_layers;
    const size_t F = sizeof(float), rows_bytes = size_t(n * kvw) * F;
    device_->upload(*prompt_x_, 0, rows, size_t(n * c_.lm.d_model) * F);
    std::unique_ptr<gpu::Encoder> enc = device_->encoder();
    gpu::Encoder& e = *enc;
    lm_->record(e, *prompt_x_, n, pos0, true);
    size_t at = 0;
    for (int il = 0; il < int(L); ++il)
        for (int which = 0; which < 2; ++which, at += rows_bytes)
            e.copy(lm_->cache(il, which), size_t(pos0 * kvw) * F, *prompt_out_, at, rows_bytes);
    device_->submit(e);
    const float* kv = static_cast<const float*>(prompt_out_->mapped());
    for (int il = 0; il < int(L); ++il)
        state.kv_cache_append_rows(il, pos0, n, kv + 2 * il * n * kvw, kv + (2 * il + 1) * n * kvw);
    resident_rows_ = pos0 + n;
    seat.dispatches += e.dispatches();
    seat.served += 1;
}

void PocketGpu::run_frames(KVCache& state, uint64_t generation, int64_t n,
                           const float* latent_in, const float* x0, int64_t steps,
                           const std::vector<float>& tsum, float* cond, float* latents) {
    gpu::SeatStats& seat = seats_["frames"];
    sync_rows(state, generation, seat);
    const int64_t host = state.n_past();
    const GpuRun r = frames_->run(n, host, latent_in, x0, steps, tsum, cond, latents);
    seat.dispatches += r.dispatches;
    seat.replays += r.replays;
    seat.served += 1;
}

void PocketGpu::sync_rows(KVCache& state, uint64_t generation, gpu::SeatStats& seat) {
    // The record: rows [0, resident_rows_) of this chunk's state. Another state or chunk
    // (generation) makes it stale; then every row goes up.
    if (resident_state_ != &state || resident_generation_ != generation) {
        resident_state_ = &state;
        resident_generation_ = generation;
        resident_base_ = generation;
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
}

void PocketGpu::frames_kept(KVCache& state, int64_t kept) {
    const int64_t pos0 = state.n_past();
    for (int il = 0; il < int(c_.lm.num_layers); ++il)
        state.kv_cache_append_rows(il, pos0, kept, frames_->kv_rows(il, 0),
                                   frames_->kv_rows(il, 1));
    resident_rows_ = pos0 + kept;
}

}  // namespace dasllama::pocket
