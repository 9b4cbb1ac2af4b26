#include "llm/model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/errors.h"
#include "core/gguf.h"
#include "core/thread_pool.h"
#include "llm/forward.h"
#include "llm/tokenizer.h"
#include "llm/weights.h"

namespace dasllama {

namespace {

// Prompt tokens per batched forward step: bounds the scratch memory (a few tens of MB for a
// 1B model) while keeping the matrix products large enough to run at full speed.
constexpr int64_t kMaxBatch = 512;

}  // namespace

LLMModel::LLMModel(const std::string& path, int64_t n_ctx, int n_threads, KVType kv_type)
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
}

LLMModel::~LLMModel() = default;

void LLMModel::check_open() const {
    if (!forward_) throw Error("LLMModel: the model is closed");
}

int64_t LLMModel::n_past() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_ ? cache_->n_past() : 0;
}

int LLMModel::n_threads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pool_ ? pool_->size() : 0;
}

void LLMModel::eval(const int32_t* ids, int64_t n, bool all_logits, float* logits,
                    const std::function<void()>& between_layers) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    if (n <= 0) throw std::invalid_argument("eval: ids is empty");
    for (int64_t i = 0; i < n; ++i)
        if (ids[i] < 0 || ids[i] >= cfg_.n_vocab)
            throw std::invalid_argument("eval: token id " + std::to_string(ids[i]) +
                                        " at index " + std::to_string(i) + " is outside [0, " +
                                        std::to_string(cfg_.n_vocab) + ")");
    const int64_t start = cache_->n_past();
    if (n > n_ctx_ - start)
        throw ShapeError("eval: n_past " + std::to_string(start) + " + " + std::to_string(n) +
                         " new tokens exceeds the context of n_ctx " + std::to_string(n_ctx_) +
                         " positions");
    try {
        forward_->run(ids, n, *cache_, *pool_, precision_, all_logits, logits, between_layers);
    } catch (...) {
        cache_->truncate(start);  // no partial rows survive a failed call
        throw;
    }
}

std::vector<float> LLMModel::eval(const std::vector<int32_t>& ids, bool all_logits) {
    std::vector<float> logits(size_t(logits_rows(int64_t(ids.size()), all_logits) * cfg_.n_vocab));
    eval(ids.data(), int64_t(ids.size()), all_logits, logits.data());
    return logits;
}

void LLMModel::truncate(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    check_open();
    const int64_t have = cache_->n_past();
    if (n < 0 || n > have)
        throw std::invalid_argument("truncate: n = " + std::to_string(n) +
                                    " is outside [0, n_past = " + std::to_string(have) + "]");
    cache_->truncate(n);
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
    forward_.reset();
    cache_.reset();
    pool_.reset();
    weights_.reset();
    file_.reset();
}

}  // namespace dasllama
