#include "asr/vad/stft.h"

#include <algorithm>
#include <cmath>

namespace dasllama::vad {

namespace {
// The graph pads the step's 576 samples by 64 on the right (reflect): 640 samples hold four
// whole frames of 256 at a hop of 128.
constexpr int64_t kReflectPad = 64;
}  // namespace

void StftFrontEnd::run(VadWeights& w, const float* samples, std::vector<float>& mag,
                       ThreadPool& pool) {
    const VadConfig& c = w.cfg;
    const int64_t n = c.input(), pad = kReflectPad;
    padded_.resize(size_t(n + pad));
    std::copy(samples, samples + n, padded_.begin());
    for (int64_t j = 0; j < pad; ++j) padded_[size_t(n + j)] = samples[n - 2 - j];
    w.stft.forward(padded_.data(), n + pad, spec_, pool);   // [frames, 2 * bins]
    const int64_t bins = c.n_bins(), frames = int64_t(spec_.size()) / (2 * bins);
    mag.resize(size_t(frames * bins));
    for (int64_t t = 0; t < frames; ++t) {
        const float* re = spec_.data() + t * 2 * bins;
        const float* im = re + bins;
        for (int64_t b = 0; b < bins; ++b)
            mag[size_t(t * bins + b)] = std::sqrt(re[b] * re[b] + im[b] * im[b]);
    }
}

}  // namespace dasllama::vad
