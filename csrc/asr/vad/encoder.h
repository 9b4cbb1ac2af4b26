// Silero VAD's encoder: four convolutions (kernel 3, padding 1, strides 1, 2, 2, 1), each
// followed by ReLU, over the magnitude frames of one step: [4, 129] -> [1, 128].
#pragma once

#include <vector>

#include "asr/vad/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::vad {

class Encoder {
public:
    // mag [frames, n_bins] -> out [128] (one row; resized).
    void run(VadWeights& w, const float* mag, int64_t frames, std::vector<float>& out,
             ThreadPool& pool);

private:
    std::vector<float> a_, b_;
};

}  // namespace dasllama::vad
