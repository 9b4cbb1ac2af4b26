// The nn activations for AVX-512 F (built with DASLLAMA_ISA_FLAGS_avx512): the AVX2 file's
// formulas on 16 lanes. Each lane's GELU and exponential equal the AVX2 kernels' bit for bit
// (simd_x86.h writes the two widths operation for operation); sums are in double lanes, so a
// softmax or log-sum-exp differs from the AVX2 one only where a different order of double
// additions rounds to another float.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/simd_x86.h"
#include "nn/activations.h"

namespace dasllama::nn::act {

#if defined(__AVX512F__)
namespace {

using cpu::simd_x86::exp_avx512;
using cpu::simd_x86::gelu_erf_avx512;

__mmask16 first(int64_t k) { return static_cast<__mmask16>((1u << k) - 1); }

void gelu_erf_16(float* x, int64_t n) {
    int64_t i = 0;
    // two vectors a step: the division and the exponential's chain overlap across them
    for (; i + 32 <= n; i += 32) {
        const __m512 a = gelu_erf_avx512(_mm512_loadu_ps(x + i));
        const __m512 b = gelu_erf_avx512(_mm512_loadu_ps(x + i + 16));
        _mm512_storeu_ps(x + i, a);
        _mm512_storeu_ps(x + i + 16, b);
    }
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu_erf_avx512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = first(n - i);
        _mm512_mask_storeu_ps(x + i, m, gelu_erf_avx512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

float row_max(const float* x, int64_t n) {
    const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    __m512 vmax = lowest;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
    if (i < n) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(lowest, first(n - i), x + i));
    return _mm512_reduce_max_ps(vmax);
}

// sum_i exp(x_i - m) in double lanes, each exponential also stored to `out` when given (out
// may be x).
double exp_sum(const float* x, int64_t n, float m, float* out) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        if (out) _mm512_storeu_ps(out + i, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                   _mm512_castps_pd(e), 1))));
    }
    if (i < n) {
        const __mmask16 k = first(n - i);
        // masked-off lanes hold m, so their exponential is 1; they are zeroed before the sum
        const __m512 e = _mm512_maskz_mov_ps(
            k, exp_avx512(_mm512_sub_ps(_mm512_mask_loadu_ps(vm, k, x + i), vm)));
        if (out) _mm512_mask_storeu_ps(out + i, k, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
                                   _mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

double log_sum_exp_16(const float* x, int64_t n) {
    const float m = row_max(x, n);
    if (std::isinf(m) && m < 0) return double(m);
    // as in the AVX2 kernel: a masked (-inf) logit adds exp(-87.3), invisible next to exp(0)
    return double(m) + std::log(exp_sum(x, n, m, nullptr));
}

void softmax_row_16(float* x, int64_t n) {
    const float m = std::max(row_max(x, n), -3.4e38f);   // a row of -inf: tiny equal weights
    const __m512 inv = _mm512_set1_ps(float(1.0 / exp_sum(x, n, m, x)));
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
    if (i < n) {
        const __mmask16 k = first(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
    }
}

const Kernels avx512{"avx512", gelu_erf_16, softmax_row_16, log_sum_exp_16};

}  // namespace

const Kernels* kernels_avx512() { return &avx512; }
#else
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace dasllama::nn::act
