#include "nn/layer_norm.h"

#include <cmath>

namespace dasllama::nn {

void layer_norm(const float* x, const float* w, const float* b, int64_t n_rows, int64_t n,
                double eps, float* out) {
    for (int64_t r = 0; r < n_rows; ++r) {
        const float* xr = x + r * n;
        float* o = out + r * n;
        double sum = 0.0;
        for (int64_t i = 0; i < n; ++i) sum += xr[i];
        const double mean = sum / double(n);
        double sq = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const double d = xr[i] - mean;
            sq += d * d;
        }
        const float inv = float(1.0 / std::sqrt(sq / double(n) + eps));
        const float m = float(mean);
        if (w)
            for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] - m) * inv * w[i] + b[i];
        else
            for (int64_t i = 0; i < n; ++i) o[i] = (xr[i] - m) * inv;
    }
}

}  // namespace dasllama::nn
