// What greedy and beam decoding share: checking a prompt and planning the steps, the prompt's
// pass (the no-speech probability and the first step's logits), and reading a step's scores
// from its rule-masked logits. A step's log-probabilities are z_i - log_sum_exp(z): the token
// order is the logits' order, so candidates are chosen on the float logits and only the
// chosen ones are normalized (no full-vocabulary log-softmax or sort per hypothesis).
#pragma once

#include <cstdint>
#include <vector>

#include "asr/whisper/decoder.h"
#include "asr/whisper/greedy.h"
#include "asr/whisper/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

struct DecodePlan {
    int64_t n_prompt = 0;
    int64_t sot_index = 0;    // where <|startoftranscript|> sits in the prompt
    int64_t max_steps = 0;    // output tokens at most (CTranslate2's max_length rule)
    bool timestamps = true;   // the prompt does not end with <|notimestamps|>
};

// Throws ShapeError for a prompt without <|startoftranscript|>, one that leaves no room in the
// text context, or a prefix token outside the vocabulary.
DecodePlan plan_decode(const WhisperConfig& c, const std::vector<int32_t>& prompt,
                       const DecodeOptions& o);

// Runs the prompt in `slot` of the decoder (reset by the caller) and writes the logits after
// its last token to z [n_vocab]. Returns the no-speech probability: the softmax of the raw
// logits at <|startoftranscript|>.
float run_prompt(Decoder& dec, const WhisperConfig& c, const std::vector<int32_t>& prompt,
                 const DecodePlan& plan, float* z, ThreadPool& pool, int slot = 0);

// A finished hypothesis's rank: sum_logprob / n_tokens^length_penalty (CTranslate2's length
// normalization; n_tokens without <|endoftext|>).
double normalized_score(double sum_logprob, size_t n_tokens, float length_penalty);

// The index of the highest of score(0) .. score(n - 1), the first of equals; n > 0.
template <class Score>
size_t first_best(size_t n, Score score) {
    size_t best = 0;
    double best_score = score(size_t(0));
    for (size_t i = 1; i < n; ++i) {
        const double s = score(i);
        if (s > best_score) {
            best = i;
            best_score = s;
        }
    }
    return best;
}

// The k highest logits' token ids into `ids`, highest first, equal logits lower id first (the
// order a stable sort of the log-probabilities gives). k is clamped to [0, n].
void top_logits(const float* z, int64_t n, int k, std::vector<int32_t>& ids);

}  // namespace dasllama::whisper
