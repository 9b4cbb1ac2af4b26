// Silero VAD's front end, as its graph computes it: the step's context + window samples
// (64 + 512) are extended on the right by a reflection of 64 samples (torch's 'reflect' pad:
// the edge sample is not repeated), convolved with the stored basis (258 filters of 256
// samples, stride 128: four frames; rows 0..128 give the real and 129..257 the imaginary parts
// of the windowed rfft), and reduced to the magnitude sqrt(re^2 + im^2) of 129 bins.
#pragma once

#include <vector>

#include "asr/vad/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::vad {

class StftFrontEnd {
public:
    // samples [cfg.input()] -> mag [frames, n_bins] time-major (frames = 4), resized.
    void run(VadWeights& w, const float* samples, std::vector<float>& mag, ThreadPool& pool);

private:
    std::vector<float> padded_, spec_;
};

}  // namespace dasllama::vad
