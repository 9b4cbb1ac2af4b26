// Pocket TTS on a GPU: the device, the resident weights and the three seats (gpu/seat.h):
//
//   prompt  the chunk's text rows (or a voice's rows) through the backbone
//   frames  backbone step + flow head, a batch of frames per command buffer
//   codec   the Mimi decoder over a step's frames, its streaming state on the device
//           (gpu_codec.h)
//
// A seat serves a call or declines it with a reason (knob, shape, device, memory, gpu_error),
// and the CPU chain takes the call with nothing lost; SeatStats count both. A gpu_error mid-
// request can be forced through the fault seam of gpu/device.h (DASLLAMA_GPU_FAIL_SUBMIT=N, or
// _core.gpu_inject_submit_fault(n): the nth encoder submit fails with DeviceError).
//
// The backbone's K/V rows: the host state (a KVCache, float32) is the contract; the device
// holds its own copy of the chunk's state. resident_ is the record of what the device copy
// holds: the rows [0, rows) of one state in one chunk (the state's address and the chunk's
// generation counter: an address alone can be reused by a later state; the model moves the
// counter on for every chunk and for every prompt outside one, a voice's or the stage's). Before the device
// computes frames it uploads the rows it lacks (counted in `uploads`); after, the frames' rows
// are read back into the host state, so the CPU can take over at any frame. The prompt seat
// writes the record as it computes the prompt's rows on the device (and reads them back), so
// the chunk's first frames find them resident; a prompt the CPU computed leaves the record
// stale and the frames seat uploads every row. A voice's rows stay resident across its chunks:
// a chunk on the voice whose rows the device copy still holds (nothing else ran on the device
// since that voice's prompt or its last chunk) starts with those rows resident, so only the
// chunk's own rows are computed or go up.
//
// The codec's stream: while the codec seat serves a chunk its streaming state lives on the
// device only; a call the CPU takes (or one the device takes after the CPU) first replays the
// stream's earlier pieces on that side (PocketModel::decode_audio; a device replay counts as
// one of the codec seat's uploads).
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
class GpuCodec;
struct DeviceBackbone;
struct DeviceMimi;

// Frames per command buffer of the frames seat.
constexpr int64_t kGpuFramesPerBatch = 8;

class PocketGpu {
public:
    // Opens the device (DeviceError naming the devices there are when `spec` matches none) and
    // uploads the weights; a failed upload leaves the seats declining with `memory`.
    PocketGpu(const PocketConfig& c, const PocketWeights& w, const std::string& spec);
    ~PocketGpu();

    std::string device_name() const;
    gpu::Device& device() { return *device_; }
    const std::map<std::string, gpu::SeatStats>& stats() const { return seats_; }
    void set_enabled(const std::string& seat, bool on);
    void decline(const std::string& seat, gpu::Decline why) { seats_[seat].decline(why); }

    // A new chunk begins on `state` after its first `keep` rows (a voice's), which a prompt
    // under the record `keep_id` made (the generation of the voice's own prompt). When the
    // device copy still holds those rows of this state (the same voice's earlier chunk, or its
    // prompt, was the last work on the device) they stay resident; else every row goes up.
    void begin_chunk(KVCache& state, uint64_t generation, int64_t keep, uint64_t keep_id);

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

    // The prompt seat: whether it takes n rows after state.n_past() (counts the decline when
    // not).
    bool admit_prompt(const KVCache& state, int64_t n);
    // Rows [n, D] through the backbone at positions state.n_past().. (admit_prompt first): the
    // rows the device copy lacks go up first (counted in the seat's uploads), the last layer
    // computes only its K and V, and every layer's new K/V rows enter the host state through
    // kv_cache_append_rows; they stay resident for the frames seat. Throws DeviceError (the
    // host state is then unchanged).
    void run_prompt(KVCache& state, uint64_t generation, const float* rows, int64_t n);

    // The codec seat: whether it takes a call of n frames on a stream whose decoder
    // transformer holds `positions` positions (counts the decline when not).
    bool admit_codec(int64_t positions, int64_t n);
    // A fresh device stream.
    void codec_reset();
    // n de-normalized latents -> audio appended (admit_codec first). `replay`: a call that
    // only rebuilds the stream's state (its audio is dropped; not counted as served). Throws
    // DeviceError (the stream is then spent).
    void codec_decode(const float* latents, int64_t n, std::vector<float>& audio, bool replay);

private:
    bool seat_open(const std::string& seat);
    // Brings the device copy up to the host state's rows under the record (state, generation),
    // counting an upload on `seat` when rows went up.
    void sync_rows(KVCache& state, uint64_t generation, gpu::SeatStats& seat);
    // Room on the device for the state's positions; false (a `memory` decline) when none.
    bool reserve_cache(const KVCache& state, const std::string& seat);

    const PocketConfig& c_;
    const PocketWeights& w_;
    std::shared_ptr<gpu::Device> device_;
    std::unique_ptr<GpuOps> ops_;
    std::unique_ptr<DeviceBackbone> backbone_;
    std::unique_ptr<GpuTransformer> lm_;
    std::unique_ptr<GpuFrames> frames_;
    std::unique_ptr<DeviceMimi> mimi_;
    std::unique_ptr<GpuCodec> codec_;
    gpu::Decline codec_absent_ = gpu::Decline::device;  // why Mimi is not resident
    gpu::Decline absent_ = gpu::Decline::device;  // why the backbone is not resident
    std::string absent_why_;
    std::map<std::string, gpu::SeatStats> seats_;
    std::map<std::string, bool> on_;
    // The residency record of the backbone's device cache.
    const KVCache* resident_state_ = nullptr;
    uint64_t resident_generation_ = 0;
    int64_t resident_rows_ = 0;
    // The generation whose prompt made the record's leading rows: the voice's rows of a chunk
    // on a voice (passed to begin_chunk), else the record's own generation.
    uint64_t resident_base_ = 0;
    // The prompt seat's input rows and readback.
    int64_t prompt_rows_ = 0;
    std::unique_ptr<gpu::Buffer> prompt_x_, prompt_out_;
};

}  // namespace dasllama::pocket
