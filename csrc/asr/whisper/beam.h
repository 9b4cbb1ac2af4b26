// Beam search over one window, as CTranslate2's BeamSearch runs it for faster-whisper at
// temperature 0 (beam_size > 1): the logit rules of greedy.h on every hypothesis; the first
// step expands the prompt's one hypothesis into 2 * beam_size candidates; each later step adds
// every beam's log-probabilities to its score and keeps the best 2 * beam_size (beam, token)
// candidates. Of those, the first beam_size are the next beams; a candidate that ends
// (<|endoftext|>, or any at the last step) is recorded as a hypothesis and its place goes to
// the next candidate that does not end. Decoding stops at the last step or once
// round(beam_size * patience) hypotheses are recorded; the best hypothesis by
// score / length^length_penalty wins. Each beam decodes in its own self-attention slot
// (decoder.h) over the window's one cross-attention cache.
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

struct BeamOptions {
    int beam_size = 5;
    float patience = 1.0f;
    float length_penalty = 1.0f;
};

// DecodeResult of the winning hypothesis: its tokens (without <|endoftext|>), its summed
// log-probability (unnormalized), the window's no-speech probability. Throws ShapeError for a
// beam_size below 2, a patience that records no hypothesis, a prefix (not supported with
// beams), or a prompt as greedy_decode refuses it.
DecodeResult beam_decode(Decoder& dec, const WhisperConfig& c, const std::vector<int32_t>& prompt,
                         const DecodeOptions& o, const BeamOptions& b, ThreadPool& pool);

}  // namespace dasllama::whisper
