// Pocket TTS on a GPU: the device, the resident weights and the three seats (gpu/seat.h):
//
//   prompt  the chunk's text rows through the backbone          (not yet on the GPU: declines
//                                                                with `knob`)
//   frames  backbone step + flow head, a batch of frames per command buffer
//   codec   the Mimi decoder over a step's frames               (not yet on the GPU: `knob`)
//
// A seat serves a call or declines it with a reason (knob, shape, device, memory, gpu_error),
// and the CPU chain takes the call with nothing lost; SeatStats count both.
//
// The backbone's K/V rows: the host state (a KVCache, float32) is the contract; the device
// holds its own copy of the chunk's state. resident_ is the record of what the device copy
// holds: the rows [0, rows) of one state in one chunk (the state's address and the chunk's
// generation counter: an address alone can be reused by a later state). Before the device
// computes frames it uploads the rows it lacks (counted in `uploads`); after, the frames' rows
// are read back into the host state, so the CPU can take over at any frame.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "gpu/seat.h"
#include "llm/kv_cache.h"
#include "tts/pocket/config.h"
#include "tts/pocket/weights.h"

namespace dasllama::pocket {

class GpuOps;
class GpuTransformer;
class GpuFrames;
struct DeviceBackbone;

// Frames per command buffer of the frames seat.
constexpr int64_t kGpuFramesPerBatch = 8;

class PocketGpu {
public:
    // Opens the device (DeviceError naming the devices there are when `spec` matches none) and
    // uploads the weights; a failed upload leaves the seats declining with `memory`.
    PocketGpu(const PocketConfig& c, const PocketWeights& w, const std::string& spec);
    ~PocketGpu();

    std::string device_name() const;
    const std::map<std::string, gpu::SeatStats>& stats() const { return seats_; }
    void set_enabled(const std::string& seat, bool on);
    void decline(const std::string& seat, gpu::Decline why) { seats_[seat].decline(why); }

    // A new chunk begins on `state` (the device copy of any earlier state is stale).
    void begin_chunk(KVCache& state, uint64_t generation);

    // The frames seat: whether it takes a batch of n frames on `state` (counts the decline
    // when not).
    bool admit_frames(const KVCache& state, int64_t n);
    // Runs n frames after state.n_past() (admit_frames first; see GpuFrames::run): the rows
    // the device copy lacks go up first. Throws DeviceError.
    void run_frames(KVCache& state, uint64_t generation, int64_t n, const float* latent_in,
                    const float* x0, int64_t steps, const std::vector<float>& tsum, float* cond,
                    float* latents);
    // After run_frames: the first `kept` frames of the batch are the chunk's; their K/V rows
    // enter the host state through kv_cache_append_rows (the host state never lags).
    void frames_kept(KVCache& state, int64_t kept);

    // Seats without a GPU path yet: their calls decline with `knob`.
    bool admit_prompt() { seats_["prompt"].decline(gpu::Decline::knob); return false; }
    bool admit_codec() { seats_["codec"].decline(gpu::Decline::knob); return false; }

private:
    bool seat_open(const std::string& seat);

    const PocketConfig& c_;
    const PocketWeights& w_;
    std::shared_ptr<gpu::Device> device_;
    std::unique_ptr<GpuOps> ops_;
    std::unique_ptr<DeviceBackbone> backbone_;
    std::unique_ptr<GpuTransformer> lm_;
    std::unique_ptr<GpuFrames> frames_;
    gpu::Decline absent_ = gpu::Decline::device;  // why the backbone is not resident
    std::string absent_why_;
    std::map<std::string, gpu::SeatStats> seats_;
    std::map<std::string, bool> on_;
    // The residency record of the backbone's device cache.
    const KVCache* resident_state_ = nullptr;
    uint64_t resident_generation_ = 0;
    int64_t resident_rows_ = 0;
};

}  // namespace dasllama::pocket
