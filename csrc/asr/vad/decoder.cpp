#include "asr/vad/decoder.h"

#include <algorithm>
#include <cmath>

namespace dasllama::vad {

float decode_step(const VadWeights& w, const float* enc, nn::LstmState& s, ThreadPool& pool) {
    w.lstm.step(enc, s, pool);
    float z = w.out_b;
    for (size_t j = 0; j < s.h.size(); ++j) z += w.out_w[j] * std::max(s.h[j], 0.0f);
    return 1.0f / (1.0f + std::exp(-z));
}

}  // namespace dasllama::vad
