// The nn activations for AVX2 + FMA (built with DASLLAMA_ISA_FLAGS_avx2).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/simd_x86.h"
#include "nn/activations.h"

namespace dasllama::nn::act {

#if defined(__AVX2__) && defined(__FMA__)
namespace {

using cpu::simd_x86::exp_avx2;

// GELU(x) = x/2 erfc(-x / sqrt 2) on 8 lanes (simd_x86.h).
inline __m256 gelu8(__m256 x) { return cpu::simd_x86::gelu_erf_avx2(x); }

void gelu_erf_avx2(float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float v[8] = {};
        std::memcpy(v, x + i, size_t(n - i) * sizeof(float));
        _mm256_store_ps(v, gelu8(_mm256_load_ps(v)));
        std::memcpy(x + i, v, size_t(n - i) * sizeof(float));
    }
}

// The row's maximum, 8 lanes at a time (-infinity stays -infinity).
float row_max(const float* x, int64_t n) {
    __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float m = lanes[0];
    for (int k = 1; k < 8; ++k) m = std::max(m, lanes[k]);
    for (int64_t j = i; j < n; ++j) m = std::max(m, x[j]);
    return m;
}

// sum_i exp(x_i - m) in double lanes (a float total of a 1500-key row would drift by ~1e-7),
// each exponential also stored to `out` when it is given (out may be x).
double exp_sum(const float* x, int64_t n, float m, float* out) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256d acc_lo = _mm256_setzero_pd(), acc_hi = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        if (out) _mm256_storeu_ps(out + i, e);
        acc_lo = _mm256_add_pd(acc_lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        acc_hi = _mm256_add_pd(acc_hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    alignas(32) double parts[4];
    _mm256_store_pd(parts, _mm256_add_pd(acc_lo, acc_hi));
    double sum = parts[0] + parts[1] + parts[2] + parts[3];
    if (i < n) {
        alignas(32) float v[8];
        for (int k = 0; k < 8; ++k) v[k] = m;   // padding; its exponentials are not summed
        std::memcpy(v, x + i, size_t(n - i) * sizeof(float));
        _mm256_store_ps(v, exp_avx2(_mm256_sub_ps(_mm256_load_ps(v), vm)));
        if (out) std::memcpy(out + i, v, size_t(n - i) * sizeof(float));
        for (int64_t k = 0; k < n - i; ++k) sum += v[k];
    }
    return sum;
}

double log_sum_exp_avx2(const float* x, int64_t n) {
    const float m = row_max(x, n);
    if (std::isinf(m) && m < 0) return double(m);
    // exp_avx2 clamps its argument at -87.3: a masked (-inf) logit adds 1.2e-38 instead of 0,
    // which no sum that holds exp(0) = 1 (the maximum's term) can see.
    return double(m) + std::log(exp_sum(x, n, m, nullptr));
}

void softmax_row_avx2(float* x, int64_t n) {
    const float m = std::max(row_max(x, n), -3.4e38f);   // a row of -inf: tiny equal weights
    const float inv_sum = float(1.0 / exp_sum(x, n, m, x));
    const __m256 inv = _mm256_set1_ps(inv_sum);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; ++i) x[i] *= inv_sum;
}

const Kernels avx2{"avx2", gelu_erf_avx2, softmax_row_avx2, log_sum_exp_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &avx2; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace dasllama::nn::act
