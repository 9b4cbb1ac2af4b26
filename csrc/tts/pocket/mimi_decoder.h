// The Mimi decoder of Pocket TTS, streaming: de-normalized latents [n, L] at the frame rate
// -> audio, n * frame_size samples per call, equal to decoding all frames at once.
//
//   quantizer output_proj (1x1)          [n, L]    -> [n, Co]
//   upsample (depthwise ConvTranspose1d)  stride u  -> [n u, Co]       (encoder frame rate)
//   decoder transformer (windowed, its own K/V cache, positions continuing across calls)
//   SEANet decoder: conv K; per ratio q: ELU, ConvTranspose1d (2q, stride q), residual blocks
//   x + conv2(ELU(conv1(ELU(x)))); ELU, conv Kl   -> [n frame_size, channels]
//
// reset() starts a fresh decoder (each text chunk has one). Rows are time-major [T, C].
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "llm/kv_cache.h"
#include "tts/pocket/blocks.h"
#include "tts/pocket/config.h"
#include "tts/pocket/conv.h"
#include "tts/pocket/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::pocket {

class MimiDecoder {
public:
    MimiDecoder(const PocketConfig& c, const PocketWeights& w, int n_threads);
    void reset();
    // latents [n, L] (de-normalized) -> audio of channel 0 appended to `audio`.
    void decode(const float* latents, int64_t n, std::vector<float>& audio, ThreadPool& pool);

private:
    struct Stage {
        StreamConvTr1d up;
        std::vector<StreamConv1d> conv1, conv2;
        // act: ELU of the stage's input; x: the upsampled stream (residuals added in place);
        // act_x: ELU of x; h: conv1's output; res: conv2's output.
        std::vector<float> act, x, act_x, h, res;
    };

    const PocketConfig& c_;
    const PocketWeights& w_;
    std::unique_ptr<StreamConvTr1d> upsample_;
    TransformerRunner tf_;
    std::unique_ptr<KVCache> cache_;
    std::unique_ptr<StreamConv1d> in_, out_;
    std::vector<Stage> stages_;
    std::vector<float> q_, x_, proj_, seanet_in_, out_act_, out_rows_;
};

// Grows a KV cache to hold n_ctx positions (rows carried over through kv_cache_append_rows).
void grow_kv_cache(std::unique_ptr<KVCache>& cache, int64_t n_ctx);

}  // namespace dasllama::pocket
