// A GGUF text model: config, weights, tokenizer, thread pool, KV cache and the forward pass,
// behind one small API. On a GPU device, prefill and decode are seats (gpu/seat.h): each call
// is served by the device-resident forward pass or declined with a reason and run on the CPU,
// the K/V rows moving between the device cache and the host cache as needed.
//
// eval() appends tokens at positions n_past().. and returns their logits; truncate() forgets
// positions so a chat can reuse its prefix. One thread at a time: calls from several threads
// are serialized by a lock (the bindings release the GIL during eval).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <map>

#include "cpu/matmul.h"
#include "gpu/device.h"
#include "gpu/seat.h"
#include "llm/kv_cache.h"
#include "llm/model_config.h"

namespace dasllama {

class Forward;
class GpuForward;
class GGUFFile;
class ThreadPool;
class Tokenizer;
struct ModelWeights;

class LLMModel {
public:
    // Opens the model at `path` (a split model by its first part). n_threads <= 0 uses the
    // physical cores. Throws GGUFError/FormatError/ShapeError naming the file and key or
    // tensor at fault, Error for an unsupported architecture, std::invalid_argument for
    // n_ctx < 1.
    // `device`: "cpu", or a GPU spec for gpu::open_device ("vulkan", "vulkan:N", "vulkan:NAME");
    // an unknown or missing device throws DeviceError naming the devices there are.
    LLMModel(const std::string& path, int64_t n_ctx = 4096, int n_threads = 0,
             KVType kv_type = KVType::F16, const std::string& device = "cpu");
    ~LLMModel();
    LLMModel(const LLMModel&) = delete;
    LLMModel& operator=(const LLMModel&) = delete;

    const ModelConfig& config() const { return cfg_; }
    const std::string& arch() const { return cfg_.arch_name; }
    int64_t n_vocab() const { return cfg_.n_vocab; }
    int64_t n_ctx() const { return n_ctx_; }
    int64_t n_past() const;
    int n_threads() const;
    KVType kv_type() const { return kv_type_; }
    const std::shared_ptr<Tokenizer>& tokenizer() const { return tokenizer_; }

    // Logits rows of eval(n tokens): n when all_logits, else 1.
    static int64_t logits_rows(int64_t n, bool all_logits) { return all_logits ? n : 1; }

    // Runs ids at positions n_past().. and writes logits_rows(n, all_logits) x n_vocab floats
    // to `logits`. Throws std::invalid_argument for n == 0 or an id outside [0, n_vocab)
    // (naming it and its index), ShapeError when n_past() + n > n_ctx (naming all three).
    // `between_layers` may throw to stop early; on any exception the cache is as it was
    // before the call.
    void eval(const int32_t* ids, int64_t n, bool all_logits, float* logits,
              const std::function<void()>& between_layers = {});
    std::vector<float> eval(const std::vector<int32_t>& ids, bool all_logits = false);

    // The final hidden states (after the output norm) of ids evaluated alone from position 0,
    // n x n_embd floats into `hidden`: what an embedding pools. On the CPU, with a cache of its
    // own: the model's cache is untouched. Throws as eval() does, against n_ctx.
    void hidden_states(const int32_t* ids, int64_t n, float* hidden);

    // The CPU parts a batching engine (serve/) runs its forward passes on. with_cpu_parts
    // calls f(parts) holding the model's lock (so it never overlaps eval) and throws Error
    // when the model is closed. `forward` is the model's own CPU forward pass: its scratch
    // holds nothing between calls, so under the lock an engine's steps use it too instead of
    // allocating a second set of max_batch-row buffers.
    struct CpuParts {
        const ModelConfig& cfg;
        const ModelWeights& weights;
        ThreadPool& pool;
        cpu::Precision precision;
        KVType kv_type;
        Forward& forward;
    };
    template <class F>
    decltype(auto) with_cpu_parts(F&& f) {
        std::lock_guard<std::mutex> lock(mu_);
        check_open();
        return f(CpuParts{cfg_, *weights_, *pool_, precision_, kv_type_, *forward_});
    }

    // The GPU parts a batching engine runs its device steps on: the model's device-resident
    // forward pass (null when it has none: `absent` and `absent_why` say why), whether the
    // seat "batch" is on, and whether the precision is f32 (exact). with_gpu_parts calls
    // f(parts) holding the model's lock and throws Error when the model is closed.
    struct GpuParts {
        GpuForward* forward;
        gpu::Decline absent;
        const std::string& absent_why;
        bool seat_on;
        bool exact;
    };
    template <class F>
    decltype(auto) with_gpu_parts(F&& f) {
        std::lock_guard<std::mutex> lock(mu_);
        check_open();
        const auto on = seat_on_.find("batch");
        return f(GpuParts{gpu_.get(), gpu_absent_, gpu_absent_why_,
                          on != seat_on_.end() && on->second,
                          precision_ == cpu::Precision::kF32});
    }

    // Forgets positions >= n; 0 <= n <= n_past() (std::invalid_argument otherwise).
    void truncate(int64_t n);
    void reset() { truncate(0); }

    // "fast" (8-bit activations, integer dot products; the default) or "f32".
    void set_precision(std::string_view precision);
    std::string precision() const;

    // The device this model was opened on: "cpu" or the GPU's name.
    std::string device_name() const;
    // Per-seat counters ("prefill", "decode"); empty on the CPU. (The seat "batch" is a
    // batching engine's, which counts it: serve/batch_engine.h.)
    std::map<std::string, gpu::SeatStats> seat_stats() const;
    // Turns a seat on or off: "prefill", "decode", or "batch" (every batching engine's steps
    // on this model). Its knob; DASLLAMA_SEAT_<NAME>=0 sets the default.
    void set_seat_enabled(const std::string& seat, bool on);
    // Profiling of GPU calls: per-dispatch times of the last served call.
    void set_profiling(bool on);
    std::vector<gpu::KernelTime> last_profile() const;

    // Releases the weights, cache and mapping; later calls throw Error.
    void close();
    bool closed() const { return forward_ == nullptr; }

private:
    void check_open() const;
    void check_ids(const int32_t* ids, int64_t n, const char* what) const;
    void open_gpu(const std::string& spec);
    bool try_gpu(const int32_t* ids, int64_t n, int64_t start, bool all_logits, float* logits);
    void sync_host_cache(int64_t upto);

    mutable std::mutex mu_;
    ModelConfig cfg_;
    int64_t n_ctx_ = 0;
    KVType kv_type_ = KVType::F16;
    cpu::Precision precision_ = cpu::Precision::kFast;
    std::shared_ptr<GGUFFile> file_;
    std::unique_ptr<ModelWeights> weights_;
    std::shared_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<ThreadPool> pool_;
    std::unique_ptr<KVCache> cache_;
    std::unique_ptr<Forward> forward_;

    // GPU state. n_past_ is the logical length; the host cache holds a prefix of it and the
    // device cache holds [0, gpu_len_).
    int64_t n_past_ = 0;
    std::shared_ptr<gpu::Device> device_;
    std::unique_ptr<GpuForward> gpu_;
    gpu::Decline gpu_absent_ = gpu::Decline::device;  // why gpu_ is null on a GPU device
    std::string gpu_absent_why_;
    int64_t gpu_len_ = 0;
    std::map<std::string, gpu::SeatStats> seats_;
    std::map<std::string, bool> seat_on_;
};

}  // namespace dasllama
