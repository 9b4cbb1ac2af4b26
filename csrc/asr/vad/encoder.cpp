#include "asr/vad/encoder.h"

#include <algorithm>
#include <string>

#include "core/errors.h"

namespace dasllama::vad {

void Encoder::run(VadWeights& w, const float* mag, int64_t frames, std::vector<float>& out,
                  ThreadPool& pool) {
    const float* in = mag;
    int64_t T = frames;
    std::vector<float>* bufs[2] = {&a_, &b_};
    for (int i = 0; i < 4; ++i) {
        std::vector<float>& y = *bufs[i % 2];
        w.enc[i].forward(in, T, y, pool);
        for (float& v : y) v = std::max(v, 0.0f);
        T = w.enc[i].out_length(T);
        in = y.data();
    }
    if (T != 1)
        throw ShapeError("silero vad encoder: " + std::to_string(frames) + " frames gave " +
                         std::to_string(T) + " rows, expected 1");
    out.assign(in, in + w.enc[3].c_out());
}

}  // namespace dasllama::vad
