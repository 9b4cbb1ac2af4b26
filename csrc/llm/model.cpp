#include "llm/model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/errors.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "llm/forward.h"
#include "llm/gpu_forward.h"
#include "llm/gpu_weights.h"
#include "llm/tokenizer.h"
#include "llm/weights.h"

namespace dasllama {

namespace {

// Prompt tokens per batched forward step: bounds the scratch memory (a few tens of MB for a
// 1B model) while keeping the matrix products large enough to run at full speed.
constexpr int64_t kMaxBatch = 512;

}  // namespace

LLMModel::LLMModel(const std::string& path, int64_t n_ctx, int n_threads, KVType kv_type,
                   const std::string& device)
    : n_ctx_(n_ctx), kv_type_(kv_type) {
    if (n_ctx < 1)
        throw std::invalid_argument("n_ctx must be >= 1, got " + std::to_string(n_ctx));
    file_ = GGUFFile::open(path);
    cfg_ = ModelConfig::from_gguf(*file_);
    weights_ = std::make_unique<ModelWeights>(load_weights(file_, cfg_));
    tokenizer_ = Tokenizer::from_gguf(*file_);
    if (tokenizer_->n_vocab() > cfg_.n_vocab)
        throw ShapeError(path + ": the tokenizer has " + std::to_string(tokenizer_->n_vocab()) +
                         " tokens but token_embd.weight only " + std::to_string(cfg_.n_vocab) +
                         " rows");
    pool_ = std::make_unique<ThreadPool>(n_threads);
    cache_ = std::make_unique<KVCache>(cfg_.n_layer, n_ctx, cfg_.n_head_kv, cfg_.head_dim,
                                       cfg_.head_dim_v, kv_type);
    forward_ = std::make_unique<Forward>(cfg_, *weights_, std::min(kMaxBatch, n_ctx),
                                         pool_->size());
    if (device != "cpu") open_gpu(device);
}

void LLMModel::open_gpu(const std::string& spec) {
    device_ = gpu::open_device(spec);  // throws DeviceError naming the devices there are
    for (const char* seat : {"prefill", "decode"}) seats_[seat] = gpu::SeatStats{};
    for (const char* seat : {"prefill", "decode", "batch"})
        seat_on_[seat] = gpu::seat_enabled_by_env(seat);
    gpu_absent_why_ = device_weights_unsupported(cfg_, *weights_);
    if (!gpu_absent_why_.empty()) {
        gpu_absent_ = gpu::Decline::shape;
        return;
    }
    try {
        gpu_ = std::make_unique<GpuForward>(cfg_, *weights_, device_, n_ctx_,
                                            std::min(kMaxBatch, n_ctx_));
    } catch (const DeviceError& e) {
        gpu_absent_ = gpu::Decline::memory;
        gpu_absent_why_ = e.what();
    }
}

std::string LLMModel::device_name() const {
    std::lock_guard<std::mutex> lock(mu_);
    return device_ ? device_->info().name : "cpu";
}

std::map<std::string, gpu::SeatStats> LLMModel::seat_stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seats_;
}

void LLMModel::set_seat_enabled(const std::string& seat, bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!seat_on_.count(seat))
        throw std::invalid_argument("no seat '" + seat + "' on this model (seats: prefill, decode, batch "
                                    "on a GPU device, none on the CPU)");
    seat_on_[seat] = on;
}

void LLMModel::set_profiling(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_) device_->set_profiling(on);
}

std::vector<gpu::KernelTime> LLMModel::last_profile() const {
    std::lock_guard<std::mutex> lock(mu_);
    return device_ ? device_->last_profile() : std::vector<gpu::KernelTime>{};
}

bool LLMModel::try_gpu(const int32_t* ids, int64_t n, int64_t start, bool all_logits,
                       float* logits) {
    gpu::SeatStats& seat = seats_[n > 1 ? "prefill" : "decode"];
    if (!seat_on_[n > 1 ? "prefill" : "decode"]) {
        seat.decline(gpu::Decline::knob);
        return false;
    }
    if (!gpu_) {
        seat.decline(gpu_absent_);
        return false;
    }
    try {
        // The device cache must hold [0, start): rows the CPU computed since go up first.
        if (gpu_len_ < start) {
            std::vector<float> k, v;
            for (int il = 0; il < int(cfg_.n_layer); ++il) {
                k.resize(size_t((start - gpu_len_) * cfg_.k_dim()));
                v.resize(size_t((start - gpu_len_) * cfg_.v_dim()));
                cache_->read_layer_rows(il, gpu_len_, start - gpu_len_, k.data(), v.data());
                gpu_->write_kv(il, gpu_len_, start - gpu_len_, k.data(), v.data());
            }
            seat.uploads += 1;
            gpu_len_ = start;
        }
        gpu_len_ = std::min(gpu_len_, start);
        gpu_->run(ids, n, start, all_logits, logits, precision_ == cpu::Precision::kF32);
    } catch (const DeviceError&) {
        seat.decline(gpu::Decline::gpu_error);
        gpu_len_ = std::min(gpu_len_, start);
        return false;
    }
    gpu_len_ = start + n;
    n_past_ = start + n;
    seat.served += 1;
    seat.dispatches += gpu_->last_dispatches();
    seat.replays += gpu_->last_replayed() ? 1 : 0;
    return true;
}

void LLMModel::sync_host_cache(int64_t upto) {
    const int64_t have = cache_->n_past();
    if (have >= upto) {
        cache_->truncate(upto);
        return;
    }
    // Only a device that ran ahead holds rows the host lacks.
    std::vector<float> k, v;
    for (int il = 0; il < int(cfg_.n_layer); ++il) {
        gpu_->read_kv(il, have, upto - have, k, v);
        cache_->kv_cache_append_rows(il, have, upto - have, k.data(), v.data());
    }
}

LLMModel::~LLMModel() = default;

void LLMModel::check_open() const {
    if (!forward_) throw Error("LLMModel: the model is closed");
}

void LLMModel::check_ids(const int32_t* ids, int64_t n, const char* what) const {
    if (n <= 0) throw std::invalid_argument(std::string(what) + ": ids is empty");
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= cfg_.n_vocab)
            throw std::invalid_argument(std::string(what) + ": token id " +
                                        std::to_string(ids[i]) + " at index " +
                                        std::to_string(i) + " is outside [0, " +
                                        std::to_string(cfg_.n_vocab) + ")");
}

int64_t LLMModel::n_past() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_ ? n_past_ : 0;
}

int LLMModel::n_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pool_ ? pool_->size() : 0;
}

void LLMModel::eval(const int32_t* ids, int64_t n, bool all_logits, float* logits,
                    const std::function<void()>& between_layers) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    check_ids(ids, n, "eval");
    const int64_t start = n_past_;
    if (n > n_ctx_ - start)
        throw ShapeError("eval: n_past " + std::to_string(start) + " + " + std::to_string(n) +
                         " new tokens exceeds the context of n_ctx " + std::to_string(n_ctx_) +
                         " positions");
    if (device_ && try_gpu(ids, n, start, all_logits, logits)) return;
    sync_host_cache(start);
    try {
        forward_->run(ids, n, *cache_, *pool_, precision_, all_logits, logits, between_layers);
    } catch (...) {
        cache_->truncate(start);  // no partial rows survive a failed call
        throw;
    }
    n_past_ = start + n;
}

void LLMModel::hidden_states(const int32_t* ids, int64_t n, float* hidden) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    check_ids(ids, n, "hidden_states");
    if (n > n_ctx_)
        throw ShapeError("hidden_states: " + std::to_string(n) + " tokens exceed the context of " +
                         "n_ctx " + std::to_string(n_ctx_) + " positions");
    KVCache scratch(cfg_.n_layer, n, cfg_.n_head_kv, cfg_.head_dim, cfg_.head_dim_v, kv_type_);
    forward_->run_hidden(ids, n, scratch, *pool_, precision_, hidden);
}

std::vector<float> LLMModel::eval(const std::vector<int32_t>& ids, bool all_logits) {
    std::vector<float> logits(size_t(logits_rows(int64_t(ids.size()), all_logits) * cfg_.n_vocab));
    eval(ids.data(), int64_t(ids.size()), all_logits, logits.data());
    return logits;
}

void LLMModel::truncate(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    const int64_t have = n_past_;
    if (n < 0 || n > have)
        throw std::invalid_argument("truncate: n = " + std::to_string(n) +
                                    " is outside [0, n_past = " + std::to_string(have) + "]");
    cache_->truncate(n);
    gpu_len_ = std::min(gpu_len_, n);
    n_past_ = n;
}

void LLMModel::set_precision(std::string_view precision) {
    std::lock_guard<std::mutex> lock(mu_);
    if (precision == "fast")
        precision_ = cpu::Precision::kFast;
    else if (precision == "f32")
        precision_ = cpu::Precision::kF32;
    else
        throw std::invalid_argument("precision must be 'fast' or 'f32', got '" +
                                    std::string(precision) + "'");
}

std::string LLMModel::precision() const {
    std::lock_guard<std::mutex> lock(mu_);
    return precision_ == cpu::Precision::kF32 ? "f32" : "fast";
}

void LLMModel::close() {
    std::lock_guard<std::mutex> lock(mu_);
    gpu_.reset();
    device_.reset();
    forward_.reset();
    cache_.reset();
    pool_.reset();
    weights_.reset();
    file_.reset();
}

}  // namespace dasllama
