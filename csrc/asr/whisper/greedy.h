// Greedy decoding of one window with Whisper's logit rules, as CTranslate2 applies them for
// faster-whisper at temperature 0 and beam 1 (dasllama.reference.whisper states them in full):
// suppress_tokens at every step, suppress_blank at the first, and the timestamp rules
// (no <|notimestamps|>; a timestamp first, no later than max_initial_timestamp_index; paired
// timestamps; non-decreasing timestamps; a timestamp whenever the timestamps' total
// probability beats the best text token) unless the prompt ends with <|notimestamps|>.
#pragma once

#include <cstdint>
#include <vector>

#include "asr/whisper/decoder.h"
#include "asr/whisper/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

struct DecodeOptions {
    std::vector<int32_t> suppress_tokens;   // masked at every step
    bool suppress_blank = true;             // mask cfg.suppress_ids_begin at the first step
    int64_t max_initial_timestamp_index = 50;   // 1.0 s in steps of 0.02 s
    int64_t max_length = 0;                 // prompt + output limit; 0: n_text_ctx
    // Tokens forced as the first outputs (faster-whisper's prefix, after <|0.00|> when
    // timestamps are on). They are part of the output, score nothing, and the first free
    // step (step == prefix.size()) is where suppress_blank applies; with a prefix the
    // first-step timestamp rules do not apply.
    std::vector<int32_t> prefix;
};

struct DecodeResult {
    std::vector<int32_t> tokens;   // the prefix, then the decoded tokens, without <|endoftext|>
    double sum_logprob = 0.0;      // of every decoded token, <|endoftext|> included
    float no_speech_prob = 0.0f;   // softmax of the raw logits at <|startoftranscript|>
};

// The logit rules of step `step` (0: the first output token) after `out` (the outputs so
// far, the prefix first), in place on logits [n_vocab]. `timestamps`: the prompt does not end
// with <|notimestamps|>. The first o.prefix.size() steps are forced.
void apply_rules(const WhisperConfig& c, const DecodeOptions& o, bool timestamps, int64_t step,
                 const std::vector<int32_t>& out, float* logits);

// Decodes after `prompt` (which must contain <|startoftranscript|>) on the decoder's window.
// Throws ShapeError for a prompt without it or too long for the text context.
DecodeResult greedy_decode(Decoder& dec, const WhisperConfig& c,
                           const std::vector<int32_t>& prompt, const DecodeOptions& o,
                           ThreadPool& pool);

}  // namespace dasllama::whisper
