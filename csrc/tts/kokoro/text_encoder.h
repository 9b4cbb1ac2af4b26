// Kokoro's text encoder (reference: ReferenceKokoro.text_encoder): the embedding, rounds of
// [convolution, LayerNorm over channels, LeakyReLU 0.2], and a BiLSTM (each weight op in its
// tensor's lane, weight_ops.h):
//     ids [T] -> [T, 512]  (time-major; synthesize aligns its transpose to [512, F]).
#pragma once

#include <cstdint>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/bilstm.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

class TextEncoder {
public:
    TextEncoder() = default;
    static TextEncoder load(const KokoroWeights& w);
    int64_t width() const { return 2 * lstm_.hidden(); }
    // ids [t] (boundary ids included) -> [t, width()].
    std::vector<float> forward(const int64_t* ids, int64_t t, ThreadPool* pool) const;

private:
    struct Round {
        Conv conv;
        const float *ln_w = nullptr, *ln_b = nullptr;
        float eps = 1e-5f;
    };
    Embedding embedding_;
    std::vector<Round> rounds_;
    BiLstm lstm_;
};

}  // namespace dasllama::kokoro
