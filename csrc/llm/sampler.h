// Token sampling: turns one position's logits into the next token id.
//
// The chain, in order (llama.cpp's default order, so settings mean the same as there):
//   1. penalties    over the last penalty_last_n accepted tokens, per distinct token t seen
//                   c times: repetition (logit / r if positive, logit * r if not), then
//                   logit -= c * frequency + presence
//   2. greedy       temperature 0: the arg max of the penalized logits (lowest id on ties);
//                   the steps below are skipped
//   3. top_k        keep the k largest logits (0 = off)
//   4. top_p        keep the smallest set of largest logits whose softmax mass reaches p
//                   (p = 1 is off); the softmax is at temperature 1, as in llama.cpp
//   5. min_p        keep logits whose probability is at least min_p times the largest's
//                   (0 = off)
//   6. temperature  divide the kept logits by T
//   7. draw         softmax of the kept logits and one uniform draw from the generator
// At least one token always survives 3-5.
//
// The generator is std::mt19937 seeded with the given seed; uniforms are built from its
// 32-bit outputs by this file (53 bits from two outputs), not by std::uniform_real_distribution,
// whose algorithm differs between standard libraries. The same seed, settings and logits
// therefore give the same tokens on every platform.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace dasllama {

struct SamplerParams {
    float temperature = 0.8f;       // >= 0; 0 = greedy
    int32_t top_k = 40;             // >= 0; 0 = off
    float top_p = 0.95f;            // (0, 1]; 1 = off
    float min_p = 0.05f;            // [0, 1]; 0 = off
    float repeat_penalty = 1.0f;    // > 0; 1 = off
    float presence_penalty = 0.0f;  // any finite value; 0 = off
    float frequency_penalty = 0.0f; // any finite value; 0 = off
    int32_t penalty_last_n = 64;    // >= -1; 0 = no history, -1 = every accepted token
    int64_t seed = 0;               // in [0, 2^32) (std::mt19937 takes 32 bits)
};

// Throws std::invalid_argument (ValueError in Python) naming the first bad field and value.
void validate(const SamplerParams& p);

class Sampler {
public:
    struct Candidate {
        float logit;
        int32_t id;
    };
    // The vocabulary-sized working arrays of a draw. A sampler has its own; samplers that never
    // draw at once (the slots of a batching engine) can share one instead of each keeping
    // n_vocab candidates (2 MB at 256K entries) alive between tokens.
    struct Scratch {
        std::vector<Candidate> cand;
        std::vector<double> weights;
        int64_t bytes() const {
            return int64_t(cand.capacity() * sizeof(Candidate) + weights.capacity() * sizeof(double));
        }
    };

    explicit Sampler(const SamplerParams& params);

    // The next token for these logits (n = the vocabulary size). Throws std::invalid_argument
    // for n == 0 or a NaN logit (naming its index). Does not record the token: call accept().
    int32_t sample(const float* logits, size_t n) { return sample(logits, n, scratch_); }
    // The same draw with the working arrays in `scratch` (same tokens as sample(logits, n)).
    int32_t sample(const float* logits, size_t n, Scratch& scratch);

    // The probabilities the draw of sample() would use, written to out[0..n) (zero for tokens
    // the chain removed). Does not advance the generator. For greedy, one-hot.
    void probabilities(const float* logits, size_t n, float* out) const;

    // Records a token in the penalty history (the prompt's tokens and each generated one).
    void accept(int32_t token);

    // Forgets the history and reseeds the generator with the original seed.
    void reset();

    const SamplerParams& params() const { return params_; }
    size_t history_size() const { return history_.size(); }

private:
    // Steps 1-6: fills cand with the surviving tokens and their final logits (for greedy,
    // just the arg max).
    void filter(const float* logits, size_t n, std::vector<Candidate>& cand) const;
    // sample() at temperature 0: the arg max of the penalized logits, as filter's step 2 gives
    // it (lowest id on ties; the same errors), without building the candidate list.
    int32_t greedy(const float* logits, size_t n) const;
    double weights(const std::vector<Candidate>& cand, std::vector<double>& w) const;
    double uniform();

    SamplerParams params_;
    std::deque<int32_t> history_;
    std::mt19937 rng_;
    // Reused between calls to avoid vocabulary-sized allocations per token.
    Scratch scratch_;
};

}  // namespace dasllama
