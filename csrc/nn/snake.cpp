#include "nn/snake.h"

#include <cmath>

#include "core/thread_pool.h"
#include "cpu/dispatch.h"

namespace dasllama::nn {

namespace snake_kernels {
namespace {

void row_generic(float* x, int64_t n, float alpha, float inv_alpha) {
    for (int64_t i = 0; i < n; ++i) {
        const float ax = alpha * x[i];
        const float s = std::sin(ax);
        const float s2 = s * s;
        const float term = inv_alpha * s2;
        x[i] = x[i] + term;
    }
}

const Kernels generic{"generic", row_generic};

const cpu::Variants<Kernels>& variants() {
    static const cpu::Variants<Kernels> list{
#if defined(DASLLAMA_X86)
        kernels_avx512(),
        kernels_avx2(),
#endif
        &generic};
    return list;
}

}  // namespace

DASLLAMA_VARIANT_ENTRY_POINTS(Kernels)

}  // namespace snake_kernels

void snake(float* x, int64_t c, int64_t l, const float* alpha, ThreadPool& pool) {
    const auto& k = snake_kernels::active();
    pool.run([&](int share, int shares) {
        const int64_t r0 = c * share / shares, r1 = c * (share + 1) / shares;
        for (int64_t r = r0; r < r1; ++r) k.row(x + r * l, l, alpha[r], 1.0f / alpha[r]);
    });
}

}  // namespace dasllama::nn
