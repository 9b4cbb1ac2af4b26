// Kokoro's prosody predictor (reference: ReferenceKokoro.duration_encoder, durations,
// f0_energy and the alignment of synthesize):
//
// - duration_encoder: x = [d_en | style] (T, 512 + S); rounds of [BiLSTM, AdaLayerNorm by
//   style, style appended again]: d (T, 512 + S).
// - durations: BiLSTM, a linear to 50 bins, logistic, summed (in double), / speed, rounded
//   half to even, at least 1: frames per input id.
// - align: en [C, F] = d^T A where A (T, F) has a 1 at (i, j) when frame j belongs to id i,
//   so column j is d's row for that id (a copy: exact).
// - f0_energy: the shared BiLSTM over en^T, then the F0 and N branches of three AdainResBlk1d
//   each (the second upsamples x2) and a 1x1 convolution: F0 (2F,), N (2F,).
// Linears, convolutions and LSTMs run in their tensors' lane (weight_ops.h, bilstm.h).
#pragma once

#include <cstdint>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/bilstm.h"
#include "tts/kokoro/style_blocks.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

// The slowest speed the durations accept: the user-facing range is [0.25, 4]; below it one id
// could ask for thousands of frames (50 bins / speed) and the alignment for gigabytes.
constexpr float kMinSpeed = 0.25f;
// The most frames one call aligns: 512 ids (ALBERT's positions) at the slowest speed's 200.
constexpr int64_t kMaxFrames = 512 * 200;

class Prosody {
public:
    Prosody() = default;
    static Prosody load(const KokoroWeights& w);

    int64_t style_width() const { return style_; }
    int64_t d_width() const { return lstms_.empty() ? 0 : 2 * lstms_.back().hidden() + style_; }

    // d_en [t, 512], s_pred [style] -> d [t, 512 + style]. rounds < 0: every round the file has.
    std::vector<float> duration_encoder(const float* d_en, int64_t t, const float* s_pred,
                                        ThreadPool* pool, int64_t rounds = -1) const;
    // d [t, d_width()] -> frames per id. totals (optional): the summed logistic / speed
    // before rounding.
    std::vector<int64_t> durations(const float* d, int64_t t, float speed, ThreadPool* pool,
                                   std::vector<float>* totals = nullptr) const;
    // d [t, c] -> en [c, sum(durations)].
    static std::vector<float> align(const float* d, int64_t t, int64_t c,
                                    const std::vector<int64_t>& durations);
    // en [d_width(), f] -> f0 and n (2f each). swap_lstm: negative control (see BiLstm).
    void f0_energy(const float* en, int64_t f, const float* s_pred, std::vector<float>& f0,
                   std::vector<float>& n, ThreadPool* pool, bool swap_lstm = false) const;

private:
    int64_t style_ = 0;
    std::vector<BiLstm> lstms_;          // predictor.text_encoder.lstms.{0, 2, 4}
    std::vector<AdaLayerNorm> norms_;   // predictor.text_encoder.lstms.{1, 3, 5}
    BiLstm lstm_, shared_;
    Linear duration_proj_;
    std::vector<AdainResBlk1d> f0_blocks_, n_blocks_;
    Conv f0_proj_, n_proj_;
};

}  // namespace dasllama::kokoro
