// Kokoro's text encoder (reference: ReferenceKokoro.text_encoder): the quantized embedding,
// rounds of [ConvInteger, LayerNorm over channels, LeakyReLU 0.2], and a BiLSTM:
//     ids [T] -> [T, 512]  (time-major; synthesize aligns its transpose to [512, F]).
#pragma once

#include <cstdint>
#include <vector>

#include "tts/kokoro/int8_ops.h"
#include "tts/kokoro/qlstm.h"
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
        QConv conv;
        const float *ln_w = nullptr, *ln_b = nullptr;
        float eps = 1e-5f;
    };
    QEmbedding embedding_;
    std::vector<Round> rounds_;
    QLstm lstm_;
};

}  // namespace dasllama::kokoro
