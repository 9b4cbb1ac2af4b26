// A GGUF text model ready to run on the CPU: config, weights, tokenizer, thread pool, KV cache
// and the forward pass, behind one small API.
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

#include "cpu/matmul.h"
#include "llm/kv_cache.h"
#include "llm/model_config.h"

namespace dasllama {

class Forward;
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
    LLMModel(const std::string& path, int64_t n_ctx = 4096, int n_threads = 0,
             KVType kv_type = KVType::F16);
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

    // Forgets positions >= n; 0 <= n <= n_past() (std::invalid_argument otherwise).
    void truncate(int64_t n);
    void reset() { truncate(0); }

    // "fast" (8-bit activations, integer dot products; the default) or "f32".
    void set_precision(std::string_view precision);
    std::string precision() const;

    // Releases the weights, cache and mapping; later calls throw Error.
    void close();
    bool closed() const { return forward_ == nullptr; }

private:
    void check_open() const;

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
};

}  // namespace dasllama
