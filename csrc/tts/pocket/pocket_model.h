// Pocket TTS on the CPU: the file, the weights, the three stages and the frame loop.
//
// Text comes in as token ids of one chunk (the caller normalizes, chunks and tokenizes the
// text with the file's tokenizer: the Python package does so with `tokenizers`). Per chunk:
//
//   begin_chunk: the voice's state (its K/V rows, a prefix kept across calls) or an empty one;
//                the chunk's text rows appended through the prompt stage; a fresh decoder.
//   step:        up to n frames: backbone step on the previous latent, EOS logit, flow head
//                on this frame's noise; the frames de-normalized and decoded by Mimi. The
//                first samples of a chunk are faded in over sample_rate / 200 samples.
//
// On the CPU, Mimi decodes a frame on a pool worker while the frame loop makes the next
// (the knob cpu.pocket.codec_overlap, pocket_model.cpp): the decoder gives the same samples
// for any split of the frames into calls and any thread count, so the audio is the serial
// chain's bit for bit, and a call still returns the audio of exactly its frames.
//
// The EOS rule (the package's): the first frame g >= min_frames_before_eos whose EOS logit
// exceeds the threshold is the EOS frame; frames_after_eos more frames follow, then the chunk
// ends. It also ends at the length cap, PocketConfig::frames_cap(tokens).
//
// Voices: add_voice(name, rows) runs a voice's prompt rows ([n, D]: bos_voice and the
// speaker-projected Mimi latents) into a state of its own. A chunk spoken with it appends
// after those rows; the next chunk truncates the state back to them (nothing is copied).
// add_voice_state(name, keys, values, n) registers a voice from a state computed elsewhere (a
// voice file of the pocket-tts package holds one): every layer's K/V rows, keys rotated.
//
// On a GPU device (csrc/tts/pocket/gpu_seats.h) the prompt, frames and codec stages are seats:
// each call is served on the device or declined with a reason, and the CPU chain serves it.
//
// One thread at a time: calls are serialized by a lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "gpu/device.h"
#include "gpu/seat.h"
#include "llm/kv_cache.h"
#include "tts/pocket/config.h"
#include "tts/pocket/noise.h"

namespace dasllama {
class GGUFFile;
class ThreadPool;
}  // namespace dasllama

namespace dasllama::pocket {

class Backbone;
class FlowHead;
class MimiDecoder;
class PocketGpu;
struct PocketWeights;

struct ChunkParams {
    float temperature = 0.3f;
    float eos_threshold = -4.0f;
    int64_t frames_after_eos = 0;
    int64_t lsd_steps = 0;          // <= 0: the file's
};

// Wall time spent in each stage since the model was opened, in milliseconds, with the work
// counted: cheap (two clock reads a stage call), always on. A request's share is the
// difference of two readings (dasllama.TTS.stats does that).
struct StageTimes {
    double prompt_ms = 0;    // begin_chunk and add_voice: text rows and the prompt stage
    double backbone_ms = 0;  // CPU frame steps: backbone and EOS logit
    double flow_ms = 0;      // CPU flow head
    double frames_gpu_ms = 0;  // the frames seat: backbone and flow head together, on a GPU
    double mimi_ms = 0;      // de-normalization, Mimi decoding and the fade-in (on the CPU
                             // partly beside the frame loop: stages may sum past the wall)
    int64_t prompt_rows = 0, frames = 0;
    int64_t frames_overlapped = 0;  // frames Mimi decoded on a worker beside the frame loop
    int64_t step_jobs = 0;  // jobs the frame loop and Mimi handed to the pool's workers
};

// What a chunk produced so far, for tests (per generated frame).
struct ChunkRecord {
    std::vector<float> conditioning;  // [frames, Z]
    std::vector<float> eos_logits;    // [frames]
    std::vector<float> latents;       // [frames, L], normalized (as the backbone reads them)
    int64_t eos_frame = -1;
    int64_t frames_cap = 0;
};

class PocketModel {
public:
    // `device`: "cpu", or a GPU spec for gpu::open_device ("vulkan", "vulkan:N",
    // "vulkan:NAME"); an unknown or missing device throws DeviceError naming the devices.
    PocketModel(const std::string& path, int n_threads = 0, const std::string& device = "cpu");
    ~PocketModel();
    PocketModel(const PocketModel&) = delete;
    PocketModel& operator=(const PocketModel&) = delete;

    const PocketConfig& config() const { return cfg_; }
    int n_threads() const;
    void set_precision(const std::string& precision);  // "fast" | "f32"
    std::string precision() const;

    // --- noise -----------------------------------------------------------------------------
    void seed_noise(uint64_t seed);
    void set_noise_rows(std::vector<float> rows);  // [n, L]

    // --- voices ----------------------------------------------------------------------------
    // Audio (mono, at the model's sample rate) -> the voice's prompt rows [n_rows, D]
    // (csrc/tts/pocket/voice_encoder.h).
    std::vector<float> encode_voice(const float* audio, int64_t n, int64_t* n_rows);
    void add_voice(const std::string& name, const float* rows, int64_t n);
    // keys and values: [num_layers][n][num_kv_heads * head_dim] float32 each.
    void add_voice_state(const std::string& name, const float* keys, const float* values,
                         int64_t n);
    void remove_voice(const std::string& name);
    std::vector<std::string> voices() const;
    int64_t voice_rows(const std::string& name) const;

    // --- the frame loop --------------------------------------------------------------------
    // voice "" is none. Throws std::invalid_argument for an unknown voice (listing the known
    // ones) or no tokens, ShapeError for a token id out of range.
    void begin_chunk(const int32_t* ids, int64_t n, const std::string& voice,
                     const ChunkParams& p);
    // Up to max_frames more frames; their audio is appended to `audio`. Returns the number of
    // frames generated; 0 when the chunk is done.
    int64_t step(int64_t max_frames, std::vector<float>& audio);
    bool chunk_done() const { return done_; }
    const ChunkRecord& record() const { return record_; }
    StageTimes stage_times() const;

    // --- stages, for tests -----------------------------------------------------------------
    std::vector<float> text_rows(const int32_t* ids, int64_t n);
    std::unique_ptr<KVCache> new_state(int64_t n_ctx) const;
    void prompt(KVCache& state, const float* rows, int64_t n, bool full_last_layer);
    std::vector<float> frame_step(KVCache& state, const float* latent);  // nullptr: lm.bos
    float eos_logit(const float* cond);
    std::vector<float> flow_head(const float* cond, const float* eps, float temperature,
                                 int64_t steps);
    // A fresh decoder, then each piece of `sizes` frames decoded in turn.
    std::vector<float> mimi_decode(const float* latents, const std::vector<int64_t>& sizes);
    std::vector<float> denormalize(const float* latents, int64_t n) const;

    // --- GPU seats ---------------------------------------------------------------------------
    // The device this model was opened on: "cpu" or the GPU's name.
    std::string device_name() const;
    // Per-seat counters ("prompt", "frames", "codec"); empty on the CPU.
    std::map<std::string, gpu::SeatStats> seat_stats() const;
    // Times every GPU dispatch of encoders recorded from now on (a replayed recording made
    // before keeps none: turn the vulkan.pocket.replay knob off to time every call); throws
    // DeviceError when the device cannot time kernels. No-op on the CPU.
    void set_profiling(bool on);
    // [(stamp, microseconds)] of each dispatch of the last GPU submit, when profiling.
    std::vector<gpu::KernelTime> last_profile() const;
    // Turns a seat on or off (its knob; DASLLAMA_SEAT_<NAME>=0 sets the default).
    void set_seat_enabled(const std::string& seat, bool on);

    void close();
    bool closed() const { return weights_ == nullptr; }

private:
    void check_open() const;
    KVCache& chunk_state();
    // The frames seat: a batch of at most `budget` frames on the device. False when it
    // declined (the CPU takes the call).
    bool step_gpu(KVCache& state, int64_t budget, std::vector<float>& batch, int64_t& made);
    // The prompt seat or the CPU backbone: rows [n, D] into `state` (the chunk counter moves
    // on first where a call is not a chunk's: the device's record names the state it holds).
    void run_prompt(KVCache& state, const float* rows, int64_t n);
    // A fresh Mimi stream (the CPU decoder's and the device's).
    void reset_decoder();
    // Hands normalized latents [n, L] to a pool worker, which decodes them into
    // codec_audio_ after the pieces handed over before (CPU only).
    void post_decode(const float* latents, int64_t n);
    // The codec seat or the CPU decoder: de-normalized latents [n, L] -> audio appended. The
    // stream's state lives where the last call ran; a call on the other side first replays
    // the stream's earlier pieces there (their audio dropped), so both give the same rows.
    void decode_audio(const float* latents, int64_t n, std::vector<float>& audio);

    mutable std::mutex mu_;
    PocketConfig cfg_;
    std::shared_ptr<GGUFFile> file_;
    std::unique_ptr<PocketWeights> weights_;
    std::unique_ptr<ThreadPool> pool_;
    // Pools of one thread (no workers): the codec's on a worker, and the frame loop's when it
    // keeps to the calling thread (cpu.pocket.codec_overlap 2).
    std::unique_ptr<ThreadPool> codec_pool_, solo_pool_;
    std::unique_ptr<Backbone> backbone_;
    std::unique_ptr<FlowHead> flow_;
    std::unique_ptr<MimiDecoder> decoder_;
    std::unique_ptr<PocketGpu> gpu_;
    NoiseSource noise_;
    uint64_t generation_ = 0;  // counts chunks: the GPU's residency records name theirs
    // The Mimi stream's pieces so far (latents and call sizes), for a replay.
    std::vector<float> codec_latents_;
    std::vector<int64_t> codec_sizes_;
    bool codec_on_gpu_ = false;  // where the stream's state is
    // What the pool's worker decoded during this step call, and the time it took (written by
    // the worker, read after ThreadPool::wait_posted).
    std::vector<float> codec_audio_;
    double codec_ms_ = 0;

    struct Voice {
        std::unique_ptr<KVCache> state;
        int64_t n_rows = 0;
        uint64_t rows_generation = 0;  // the generation its rows were made under
    };
    std::map<std::string, Voice> voices_;
    std::unique_ptr<KVCache> plain_state_;   // the state of a chunk without a voice

    // the chunk in progress
    std::string voice_;
    ChunkParams params_;
    bool done_ = true;
    int64_t frame_ = 0, faded_ = 0;
    std::vector<float> latent_, cond_, eps_;
    ChunkRecord record_;
    StageTimes times_;
};

}  // namespace dasllama::pocket
