// Sampling at a temperature above 0, as CTranslate2 runs it for faster-whisper's temperature
// fallback: best_of independent candidates (faster-whisper's num_hypotheses, beam size 1); at
// each step every candidate's logits go through the rules of greedy.h, a token is drawn from
// softmax(z / temperature) over the whole vocabulary (no top-k), and the candidate's score
// gains that token's log-probability at temperature 1 (log_softmax(z), as CTranslate2's
// sampler gathers it). The candidate with the best score / length^length_penalty wins.
// Candidates decode together, one self-attention slot each; one that ends leaves the batch.
// Draws come from a 64-bit Mersenne Twister seeded with `seed`: the same seed, prompt and
// window give the same tokens.
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

struct SampleOptions {
    float temperature = 1.0f;   // > 0
    int best_of = 1;            // candidates, >= 1
    float length_penalty = 1.0f;
    uint64_t seed = 0;
};

// The winning candidate's DecodeResult. Throws ShapeError for a temperature that is not a
// finite number above 0, a best_of below 1, or a prompt as greedy_decode refuses it.
DecodeResult sample_decode(Decoder& dec, const WhisperConfig& c, const std::vector<int32_t>& prompt,
                           const DecodeOptions& o, const SampleOptions& s, ThreadPool& pool);

}  // namespace dasllama::whisper
