#include "nn/activations.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"
#include "cpu/dispatch.h"

namespace dasllama::nn {

namespace act {
namespace {

void gelu_erf_generic(float* x, int64_t n) {
    constexpr float kInvSqrt2 = 0.70710678118654752f;
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void softmax_row_generic(float* x, int64_t n) {
    const float m = *std::max_element(x, x + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - m);
        sum += x[i];
    }
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

double log_sum_exp_generic(const float* x, int64_t n) {
    const float m = *std::max_element(x, x + n);
    if (std::isinf(m) && m < 0) return double(m);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - double(m));
    return double(m) + std::log(sum);
}

const Kernels generic{"generic", gelu_erf_generic, softmax_row_generic, log_sum_exp_generic};

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

}  // namespace act

namespace {
// Below this many elements one thread does the work: a pool round costs more.
constexpr int64_t kMinParallel = 1 << 14;
}  // namespace

void gelu_erf(float* x, int64_t n, ThreadPool& pool) {
    auto* kernel = act::active().gelu_erf;
    if (n < kMinParallel) {
        kernel(x, n);
        return;
    }
    pool.run([&](int t, int nt) {
        const int64_t per = (n + nt - 1) / nt;
        const int64_t i0 = std::min(n, t * per), i1 = std::min(n, (t + 1) * per);
        kernel(x + i0, i1 - i0);
    });
}

void softmax_row(float* x, int64_t n) { act::active().softmax_row(x, n); }

double log_sum_exp(const float* x, int64_t n) { return act::active().log_sum_exp(x, n); }

}  // namespace dasllama::nn
