#include "tts/pocket/pocket_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "core/errors.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "core/tuning.h"
#include "tts/pocket/backbone.h"
#include "tts/pocket/flow_head.h"
#include "tts/pocket/gpu_seats.h"
#include "tts/pocket/mimi_decoder.h"
#include "tts/pocket/voice_encoder.h"
#include "tts/pocket/weights.h"

namespace dasllama::pocket {

namespace {

// Adds the wall time of its scope, in milliseconds, to `into`.
class StageClock {
public:
    explicit StageClock(double& into) : into_(into), t0_(std::chrono::steady_clock::now()) {}
    ~StageClock() {
        into_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_)
                     .count();
    }
    StageClock(const StageClock&) = delete;
    StageClock& operator=(const StageClock&) = delete;

private:
    double& into_;
    std::chrono::steady_clock::time_point t0_;
};

// How the CPU chain shares the pool's threads between the frame loop and Mimi decoding. The
// frame loop is a chain of short matrix-vector products, each a pool job that two threads
// speed up by less than two, so the codec running beside it on a thread of its own pays:
//   0: one after the other, each on the whole pool (the frames of a call, then their audio);
//   1: each frame's decoding posted to a pool worker as the frame is made; the frame loop's
//      jobs go on with the threads that are free (the worker rejoins between frames), and the
//      call's last frame, with nothing left to overlap, is decoded on the whole pool;
//   2: the codec keeps a worker to itself for the whole call and the frame loop keeps to the
//      calling thread (the split of one codec thread, one frame thread).
// With one thread, 0. Any value gives the same audio (tests/test_pocket_overlap.py).
const tuning::Knob& kCodecOverlap = tuning::define(
    "cpu.pocket.codec_overlap", 1, 0, 2,
    "Pocket TTS on the CPU: 0 Mimi after the frames, 1 beside them on a free worker, 2 on a "
    "worker of its own");

// Waits for the posted decodes when a step unwinds with an exception (they touch the model);
// nullptr: nothing is posted.
class PostedWait {
public:
    explicit PostedWait(ThreadPool* pool) : pool_(pool) {}
    ~PostedWait() {
        if (!pool_) return;
        try {
            pool_->wait_posted();
        } catch (...) {
            // the exception already propagating is the one the caller sees
        }
    }
    void release() { pool_ = nullptr; }
    PostedWait(const PostedWait&) = delete;
    PostedWait& operator=(const PostedWait&) = delete;

private:
    ThreadPool* pool_;
};

}  // namespace

PocketModel::PocketModel(const std::string& path, int n_threads, const std::string& device) {
    file_ = GGUFFile::open(path);
    cfg_ = read_pocket_config(*file_);
    weights_ = std::make_unique<PocketWeights>(load_pocket_weights(file_, cfg_));
    pool_ = std::make_unique<ThreadPool>(n_threads);
    codec_pool_ = std::make_unique<ThreadPool>(1);
    solo_pool_ = std::make_unique<ThreadPool>(1);
    backbone_ = std::make_unique<Backbone>(cfg_, *weights_, pool_->size());
    flow_ = std::make_unique<FlowHead>(cfg_, *weights_);
    decoder_ = std::make_unique<MimiDecoder>(cfg_, *weights_, pool_->size());
    noise_.seed(0);
    if (device != "cpu") gpu_ = std::make_unique<PocketGpu>(cfg_, *weights_, device);
}

PocketModel::~PocketModel() = default;

void PocketModel::check_open() const {
    if (!weights_) throw Error("pocket: the model is closed");
}

int PocketModel::n_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    return pool_->size();
}

void PocketModel::set_precision(const std::string& precision) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (precision == "fast") backbone_->set_precision(cpu::Precision::kFast);
    else if (precision == "f32") backbone_->set_precision(cpu::Precision::kF32);
    else throw std::invalid_argument("precision must be 'fast' or 'f32', got '" + precision + "'");
}

std::string PocketModel::precision() const {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    return backbone_->precision() == cpu::Precision::kFast ? "fast" : "f32";
}

void PocketModel::seed_noise(uint64_t seed) {
    std::lock_guard<std::mutex> lock(mu_);
    noise_.seed(seed);
}

void PocketModel::set_noise_rows(std::vector<float> rows) {
    std::lock_guard<std::mutex> lock(mu_);
    if (rows.size() % size_t(cfg_.latent_dim))
        throw ShapeError("pocket: noise of " + std::to_string(rows.size()) +
                         " values is not rows of latent_dim " + std::to_string(cfg_.latent_dim));
    noise_.set_rows(std::move(rows), cfg_.latent_dim);
}

// =============================================================================================
// Voices
// =============================================================================================

std::vector<float> PocketModel::encode_voice(const float* audio, int64_t n, int64_t* n_rows) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    return pocket::encode_voice(cfg_, *weights_, audio, n, *pool_, n_rows);
}

void PocketModel::add_voice(const std::string& name, const float* rows, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (name.empty()) throw std::invalid_argument("pocket: a voice needs a name");
    if (n <= 0) throw std::invalid_argument("pocket: voice '" + name + "' has no rows");
    StageClock clock(times_.prompt_ms);
    times_.prompt_rows += n;
    Voice v;
    // Room for the voice and one chunk of the usual size; grows when a chunk needs more.
    backbone_->ensure_capacity(v.state, n + cfg_.chunk_tokens + cfg_.frames_cap(cfg_.chunk_tokens));
    ++generation_;
    run_prompt(*v.state, rows, n);
    v.n_rows = n;
    v.rows_generation = generation_;
    if (voice_ == name) done_ = true;  // a chunk in progress with the old rows ends
    voices_[name] = std::move(v);
}

void PocketModel::add_voice_state(const std::string& name, const float* keys,
                                  const float* values, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (name.empty()) throw std::invalid_argument("pocket: a voice needs a name");
    if (n <= 0) throw std::invalid_argument("pocket: voice '" + name + "' has no rows");
    Voice v;
    backbone_->ensure_capacity(v.state, n + cfg_.chunk_tokens + cfg_.frames_cap(cfg_.chunk_tokens));
    const int64_t layer_floats = n * cfg_.lm.num_kv_heads * cfg_.lm.head_dim;
    for (int il = 0; il < int(cfg_.lm.num_layers); ++il)
        v.state->kv_cache_append_rows(il, 0, n, keys + il * layer_floats,
                                      values + il * layer_floats);
    ++generation_;  // a resident copy of an older voice's rows on the GPU is stale now
    v.n_rows = n;
    v.rows_generation = generation_;
    if (voice_ == name) done_ = true;
    voices_[name] = std::move(v);
}

void PocketModel::remove_voice(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    if (voices_.erase(name) == 0)
        throw std::invalid_argument("pocket: no voice named '" + name + "'");
    if (voice_ == name) done_ = true;
}

std::vector<std::string> PocketModel::voices() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& kv : voices_) out.push_back(kv.first);
    return out;
}

int64_t PocketModel::voice_rows(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = voices_.find(name);
    if (it == voices_.end()) throw std::invalid_argument("pocket: no voice named '" + name + "'");
    return it->second.n_rows;
}

// =============================================================================================
// The frame loop
// =============================================================================================

KVCache& PocketModel::chunk_state() {
    if (voice_.empty()) return *plain_state_;
    return *voices_.at(voice_).state;
}

void PocketModel::begin_chunk(const int32_t* ids, int64_t n, const std::string& voice,
                              const ChunkParams& p) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (n <= 0) throw std::invalid_argument("pocket: a chunk needs at least one token");
    std::unique_ptr<KVCache>* state = &plain_state_;
    int64_t keep = 0;
    uint64_t keep_id = 0;
    if (!voice.empty()) {
        auto it = voices_.find(voice);
        if (it == voices_.end()) {
            std::string known;
            for (const auto& kv : voices_) known += (known.empty() ? "'" : ", '") + kv.first + "'";
            throw std::invalid_argument("pocket: no voice named '" + voice + "'; known voices: " +
                                        (known.empty() ? "none" : known));
        }
        state = &it->second.state;
        keep = it->second.n_rows;
        keep_id = it->second.rows_generation;
    }
    StageClock clock(times_.prompt_ms);
    times_.prompt_rows += n;
    const std::vector<float> rows = [&] {
        std::vector<float> r(size_t(n * cfg_.lm.d_model));
        backbone_->text_rows(ids, n, r.data(), *pool_);
        return r;
    }();
    const int64_t cap = cfg_.frames_cap(n);
    // Forget the previous chunk: the state's fill length goes back to the voice's rows.
    if (*state) (*state)->truncate(keep);
    backbone_->ensure_capacity(*state, keep + n + cap);
    ++generation_;
    if (gpu_) gpu_->begin_chunk(**state, generation_, keep, keep_id);
    run_prompt(**state, rows.data(), n);

    voice_ = voice;
    params_ = p;
    reset_decoder();
    done_ = false;
    frame_ = 0;
    faded_ = 0;
    latent_.clear();
    record_ = ChunkRecord();
    record_.frames_cap = cap;
}

int64_t PocketModel::step(int64_t max_frames, std::vector<float>& audio) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (done_) return 0;  // also when no chunk was begun, or its voice was replaced
    const int64_t L = cfg_.latent_dim, Z = cfg_.cond_dim();
    KVCache& state = chunk_state();
    std::vector<float> batch;  // this call's latents, normalized
    int64_t made = 0;
    cond_.resize(size_t(Z));
    eps_.resize(size_t(L));
    bool on_gpu = gpu_ != nullptr;
    const int64_t overlap = gpu_ || pool_->size() < 2 ? 0 : kCodecOverlap.get();
    ThreadPool& frame_pool = overlap == 2 ? *solo_pool_ : *pool_;
    int64_t posted = 0;  // frames of `batch` handed to the codec's worker
    codec_audio_.clear();
    codec_ms_ = 0;
    PostedWait unwinding(overlap ? pool_.get() : nullptr);
    const int64_t jobs0 = pool_->jobs_run();
    while (!done_ && made < max_frames) {
        const int64_t g = frame_;
        const int64_t after = params_.frames_after_eos;
        if (g >= record_.frames_cap || (record_.eos_frame >= 0 && g >= record_.eos_frame + after)) {
            done_ = true;
            break;
        }
        if (on_gpu) {
            StageClock clock(times_.frames_gpu_ms);
            if (step_gpu(state, max_frames - made, batch, made)) continue;
            on_gpu = false;  // declined: the CPU serves the rest of this call
        }
        float logit;
        {
            StageClock clock(times_.backbone_ms);
            backbone_->frame_step(state, latent_.empty() ? nullptr : latent_.data(),
                                  cond_.data(), frame_pool);
            logit = backbone_->eos_logit(cond_.data());
        }
        if (logit > params_.eos_threshold && record_.eos_frame < 0 &&
            g >= cfg_.min_frames_before_eos)
            record_.eos_frame = g;
        if (record_.eos_frame >= 0 && g >= record_.eos_frame + after) {
            done_ = true;
            break;
        }
        const bool noisy = params_.temperature > 0.0f;
        if (noisy) noise_.next(eps_.data(), L);
        latent_.resize(size_t(L));
        {
            StageClock clock(times_.flow_ms);
            flow_->run(cond_.data(), noisy ? eps_.data() : nullptr, params_.temperature,
                       params_.lsd_steps, latent_.data(), frame_pool);
        }
        record_.conditioning.insert(record_.conditioning.end(), cond_.begin(), cond_.end());
        record_.eos_logits.push_back(logit);
        record_.latents.insert(record_.latents.end(), latent_.begin(), latent_.end());
        batch.insert(batch.end(), latent_.begin(), latent_.end());
        ++frame_;
        ++made;
        if (overlap) {
            // The call's last frame (known here unless the next frame's EOS logit ends the
            // chunk) has no frame left to overlap: in mode 1 the whole pool decodes it below.
            const bool last = made == max_frames || frame_ >= record_.frames_cap ||
                              (record_.eos_frame >= 0 && frame_ >= record_.eos_frame + after);
            if (!last || overlap == 2) {
                post_decode(batch.data() + posted * L, made - posted);
                posted = made;
            }
        }
    }
    if (overlap) {
        unwinding.release();
        try {
            pool_->wait_posted();
        } catch (...) {
            done_ = true;  // the stream lost a piece: the chunk cannot go on
            throw;
        }
        times_.mimi_ms += codec_ms_;
        times_.frames_overlapped += posted;
    }
    if (made == 0) return 0;
    times_.frames += made;
    StageClock clock(times_.mimi_ms);
    const size_t start = audio.size();
    audio.insert(audio.end(), codec_audio_.begin(), codec_audio_.end());
    if (made > posted) {
        const std::vector<float> mimi_in = denormalize(batch.data() + posted * L, made - posted);
        decode_audio(mimi_in.data(), made - posted, audio);
    }
    // The package fades each chunk in over its first sample_rate / 200 samples
    // (linspace(0, 1, n): the first sample is silenced, the n-th kept whole).
    const int64_t fade = cfg_.sample_rate / 200;
    for (size_t i = start; i < audio.size() && faded_ < fade; ++i, ++faded_)
        audio[i] *= fade > 1 ? float(double(faded_) / double(fade - 1)) : 1.0f;
    times_.step_jobs += pool_->jobs_run() - jobs0;
    return made;
}

bool PocketModel::step_gpu(KVCache& state, int64_t budget, std::vector<float>& batch,
                           int64_t& made) {
    const int64_t L = cfg_.latent_dim, Z = cfg_.cond_dim(), after = params_.frames_after_eos;
    int64_t n = std::min({kGpuFramesPerBatch, budget, record_.frames_cap - frame_});
    if (record_.eos_frame >= 0) n = std::min(n, record_.eos_frame + after - frame_);
    if (!gpu_->admit_frames(state, n)) return false;
    const int64_t steps = params_.lsd_steps > 0 ? params_.lsd_steps : cfg_.lsd_decode_steps;
    const bool noisy = params_.temperature > 0.0f;
    // Each frame's starting latent, from noise drawn ahead in the CPU chain's order. Frames
    // past the chunk's end are computed and dropped, so the generator is rewound and then
    // advanced by the frames kept only: both chains leave it alike.
    std::vector<float> x0(size_t(n * L), 0.0f);
    const NoiseSource saved = noise_;
    if (noisy) {
        const float std_dev = std::sqrt(params_.temperature);
        try {
            for (int64_t j = 0; j < n; ++j) {
                noise_.next(eps_.data(), L);
                for (int64_t i = 0; i < L; ++i) x0[size_t(j * L + i)] = std_dev * eps_[size_t(i)];
            }
        } catch (const ShapeError&) {
            // Supplied rows ran out: a frame kept past them throws below, as on the CPU.
        }
    }
    noise_ = saved;
    std::vector<float> conds(size_t(n * Z)), lats(size_t(n * L));
    const float* latent_in = latent_.empty() ? weights_->bos.data() : latent_.data();
    try {
        gpu_->run_frames(state, generation_, n, latent_in, x0.data(), steps,
                         flow_->time_sums(steps, *pool_), conds.data(), lats.data());
    } catch (const DeviceError&) {
        gpu_->decline("frames", gpu::Decline::gpu_error);
        return false;
    }
    // The CPU chain's frame rules, on the batch's conditioning.
    int64_t kept = 0;
    for (; kept < n; ++kept) {
        const int64_t g = frame_;
        const float* cond = conds.data() + kept * Z;
        const float logit = backbone_->eos_logit(cond);
        if (logit > params_.eos_threshold && record_.eos_frame < 0 &&
            g >= cfg_.min_frames_before_eos)
            record_.eos_frame = g;
        if (record_.eos_frame >= 0 && g >= record_.eos_frame + after) {
            done_ = true;
            break;
        }
        if (noisy) noise_.next(eps_.data(), L);
        latent_.assign(lats.begin() + kept * L, lats.begin() + (kept + 1) * L);
        record_.conditioning.insert(record_.conditioning.end(), cond, cond + Z);
        record_.eos_logits.push_back(logit);
        record_.latents.insert(record_.latents.end(), latent_.begin(), latent_.end());
        batch.insert(batch.end(), latent_.begin(), latent_.end());
        ++frame_;
        ++made;
    }
    gpu_->frames_kept(state, kept);
    return true;
}

void PocketModel::post_decode(const float* latents, int64_t n) {
    std::vector<float> in = denormalize(latents, n);
    codec_latents_.insert(codec_latents_.end(), in.begin(), in.end());
    codec_sizes_.push_back(n);
    pool_->post([this, in = std::move(in), n] {
        const auto t0 = std::chrono::steady_clock::now();
        decoder_->decode(in.data(), n, codec_audio_, *codec_pool_);
        codec_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                               t0)
                         .count();
    });
}

void PocketModel::reset_decoder() {
    decoder_->reset();
    codec_on_gpu_ = false;  // the device stream starts over when the codec seat next serves
    codec_latents_.clear();
    codec_sizes_.clear();
}

void PocketModel::decode_audio(const float* latents, int64_t n, std::vector<float>& audio) {
    if (n <= 0) return;
    const int64_t L = cfg_.latent_dim;
    int64_t before = 0;
    for (int64_t s : codec_sizes_) before += s;
    const int64_t positions = before * std::max<int64_t>(1, cfg_.upsample_stride);
    bool on_gpu = gpu_ && gpu_->admit_codec(positions, n);
    if (on_gpu) {
        try {
            if (!codec_on_gpu_) {
                // The device stream starts over (a failed call may have left it half-moved).
                gpu_->codec_reset();
                int64_t at = 0;
                for (int64_t s : codec_sizes_) {
                    std::vector<float> dropped;
                    gpu_->codec_decode(codec_latents_.data() + at * L, s, dropped, true);
                    at += s;
                }
            }
            codec_on_gpu_ = true;
            gpu_->codec_decode(latents, n, audio, false);
        } catch (const DeviceError&) {
            gpu_->decline("codec", gpu::Decline::gpu_error);
            on_gpu = false;
        }
    }
    if (!on_gpu) {
        if (codec_on_gpu_) {
            decoder_->reset();
            int64_t at = 0;
            for (int64_t s : codec_sizes_) {
                std::vector<float> dropped;
                decoder_->decode(codec_latents_.data() + at * L, s, dropped, *pool_);
                at += s;
            }
            codec_on_gpu_ = false;
        }
        decoder_->decode(latents, n, audio, *pool_);
    }
    codec_latents_.insert(codec_latents_.end(), latents, latents + n * L);
    codec_sizes_.push_back(n);
}

StageTimes PocketModel::stage_times() const {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
}

// =============================================================================================
// GPU seats
// =============================================================================================

std::string PocketModel::device_name() const {
    std::lock_guard<std::mutex> lock(mu_);
    return gpu_ ? gpu_->device_name() : "cpu";
}

std::map<std::string, gpu::SeatStats> PocketModel::seat_stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return gpu_ ? gpu_->stats() : std::map<std::string, gpu::SeatStats>{};
}

void PocketModel::set_profiling(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    if (gpu_) gpu_->device().set_profiling(on);
}

std::vector<gpu::KernelTime> PocketModel::last_profile() const {
    std::lock_guard<std::mutex> lock(mu_);
    return gpu_ ? gpu_->device().last_profile() : std::vector<gpu::KernelTime>{};
}

void PocketModel::set_seat_enabled(const std::string& seat, bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gpu_)
        throw std::invalid_argument("no seat '" + seat + "' on this model: seats (prompt, "
                                    "frames, codec) exist on a GPU device, none on the CPU");
    gpu_->set_enabled(seat, on);
}

// =============================================================================================
// Stages
// =============================================================================================

std::vector<float> PocketModel::text_rows(const int32_t* ids, int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    std::vector<float> rows(size_t(n * cfg_.lm.d_model));
    backbone_->text_rows(ids, n, rows.data(), *pool_);
    return rows;
}

std::unique_ptr<KVCache> PocketModel::new_state(int64_t n_ctx) const {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    return backbone_->new_state(n_ctx);
}

void PocketModel::prompt(KVCache& state, const float* rows, int64_t n, bool full_last_layer) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (full_last_layer || n <= 0) {
        backbone_->prompt(state, rows, n, *pool_, full_last_layer);  // a CPU-only test path
        return;
    }
    ++generation_;
    run_prompt(state, rows, n);
}

void PocketModel::run_prompt(KVCache& state, const float* rows, int64_t n) {
    if (gpu_ && gpu_->admit_prompt(state, n)) {
        try {
            gpu_->run_prompt(state, generation_, rows, n);
            return;
        } catch (const DeviceError&) {
            gpu_->decline("prompt", gpu::Decline::gpu_error);
        }
    }
    backbone_->prompt(state, rows, n, *pool_);
}

std::vector<float> PocketModel::frame_step(KVCache& state, const float* latent) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    std::vector<float> cond(size_t(cfg_.cond_dim()));
    backbone_->frame_step(state, latent, cond.data(), *pool_);
    return cond;
}

float PocketModel::eos_logit(const float* cond) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    return backbone_->eos_logit(cond);
}

std::vector<float> PocketModel::flow_head(const float* cond, const float* eps, float temperature,
                                          int64_t steps) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    std::vector<float> latent(size_t(cfg_.latent_dim));
    flow_->run(cond, eps, temperature, steps, latent.data(), *pool_);
    return latent;
}

std::vector<float> PocketModel::mimi_decode(const float* latents,
                                            const std::vector<int64_t>& sizes) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    reset_decoder();
    done_ = true;  // the decoder is shared with the frame loop
    std::vector<float> audio;
    int64_t at = 0;
    for (int64_t n : sizes) {
        decode_audio(latents + at * cfg_.latent_dim, n, audio);
        at += n;
    }
    return audio;
}

std::vector<float> PocketModel::denormalize(const float* latents, int64_t n) const {
    const int64_t L = cfg_.latent_dim;
    std::vector<float> out(size_t(n * L));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < L; ++i)
            out[size_t(t * L + i)] = latents[t * L + i] * weights_->latent_std[size_t(i)] +
                                     weights_->latent_mean[size_t(i)];
    return out;
}

void PocketModel::close() {
    std::lock_guard<std::mutex> lock(mu_);
    gpu_.reset();
    decoder_.reset();
    flow_.reset();
    backbone_.reset();
    voices_.clear();
    plain_state_.reset();
    weights_.reset();
    pool_.reset();
    file_.reset();
    done_ = true;
}

}  // namespace dasllama::pocket
