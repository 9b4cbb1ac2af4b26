#include "nn/activations.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"

namespace dasllama::nn {

namespace {
// Below this many elements one thread does the work: a pool round costs more.
constexpr int64_t kMinParallel = 1 << 14;
}  // namespace

void gelu_erf(float* x, int64_t n, ThreadPool& pool) {
    auto body = [x](int64_t i0, int64_t i1) {
        constexpr float kInvSqrt2 = 0.70710678118654752f;
        for (int64_t i = i0; i < i1; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
    };
    if (n < kMinParallel) {
        body(0, n);
        return;
    }
    pool.run([&](int t, int nt) {
        const int64_t per = (n + nt - 1) / nt;
        body(std::min(n, t * per), std::min(n, (t + 1) * per));
    });
}

}  // namespace dasllama::nn
