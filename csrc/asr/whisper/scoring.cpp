#include "asr/whisper/scoring.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "nn/activations.h"

namespace dasllama::whisper {

DecodePlan plan_decode(const WhisperConfig& c, const std::vector<int32_t>& prompt,
                       const DecodeOptions& o) {
    const auto sot = std::find(prompt.begin(), prompt.end(), c.tok.sot);
    if (sot == prompt.end())
        throw ShapeError("whisper decode: the prompt has no <|startoftranscript|> (" +
                         std::to_string(c.tok.sot) + ")");
    const int64_t limit = o.max_length > 0 ? std::min(o.max_length, c.n_text_ctx) : c.n_text_ctx;
    DecodePlan p;
    p.n_prompt = int64_t(prompt.size());
    if (p.n_prompt >= limit)
        throw ShapeError("whisper decode: a prompt of " + std::to_string(p.n_prompt) +
                         " tokens leaves no room in a text context of " + std::to_string(limit));
    for (int32_t id : o.prefix)
        if (id < 0 || id >= c.n_vocab)
            throw ShapeError("whisper decode: prefix token " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(c.n_vocab));
    p.sot_index = int64_t(sot - prompt.begin());
    p.max_steps = std::min(limit / 2, limit - (p.n_prompt - 1));
    p.timestamps = prompt.back() != c.tok.no_timestamps;
    return p;
}

float run_prompt(Decoder& dec, const WhisperConfig& c, const std::vector<int32_t>& prompt,
                 const DecodePlan& plan, float* z, ThreadPool& pool, int slot) {
    const int64_t d = c.n_text_state;
    const float* h = dec.forward(prompt.data(), plan.n_prompt, pool, slot);
    dec.logits(h + plan.sot_index * d, 1, z, pool);
    const double log_norm = nn::log_sum_exp(z, c.n_vocab);
    const float no_speech = float(std::exp(double(z[c.tok.no_speech]) - log_norm));
    dec.logits(h + (plan.n_prompt - 1) * d, 1, z, pool);
    return no_speech;
}

double normalized_score(double sum_logprob, size_t n_tokens, float length_penalty) {
    return sum_logprob / std::pow(double(n_tokens), double(length_penalty));
}

void top_logits(const float* z, int64_t n, int k, std::vector<int32_t>& ids) {
    k = int(std::clamp<int64_t>(k, 0, n));
    ids.clear();
    if (k == 0) return;
    // ids kept sorted by (logit descending, id ascending); ids arrive ascending, so a later id
    // enters only when its logit is strictly higher than the current k-th.
    auto insert = [&](int32_t id) {
        auto at = std::upper_bound(ids.begin(), ids.end(), id, [&](int32_t a, int32_t b) {
            return z[a] > z[b];
        });
        ids.insert(at, id);
    };
    for (int32_t i = 0; i < k; ++i) insert(i);
    float worst = z[ids.back()];
    for (int64_t i = k; i < n; ++i) {
        if (!(z[i] > worst)) continue;
        ids.pop_back();
        insert(int32_t(i));
        worst = z[ids.back()];
    }
}

}  // namespace dasllama::whisper
