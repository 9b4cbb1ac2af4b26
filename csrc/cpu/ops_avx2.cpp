// The dispatched ops kernels for AVX2 + FMA + F16C (built with DASLLAMA_ISA_FLAGS_avx2): half
// conversions of KV cache rows, the attention's weighted sum of values, and the ELU and GELU
// activations of the speech decoders.
#include <immintrin.h>

#include <cstring>

#include "core/formats.h"
#include "cpu/ops.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::ops {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
namespace {

void f16_to_f32_avx2(const uint16_t* src, float* dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_avx2(const float* src, uint16_t* dst, int64_t n) {
    int64_t i = 0;
    // Round to nearest even, as f32_to_f16; finite values and infinities convert alike (NaN
    // payloads may differ, and a KV row holds none).
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void axpy_avx2(float* y, float a, const float* x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

using simd_x86::exp_avx2;

// expm1(x) for x <= 0: its Taylor series to x^8 where |x| < 1/2 (the remainder is below
// 2^-27 of the result), exp(x) - 1 further out (the result is at least 0.39 in magnitude
// there, so the subtraction loses nothing that matters).
inline __m256 expm1_neg_avx2(__m256 x) {
    __m256 p = _mm256_set1_ps(1.0f / 40320.0f);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 5040.0f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), x);
    const __m256 far = _mm256_sub_ps(exp_avx2(x), _mm256_set1_ps(1.0f));
    const __m256 near = _mm256_cmp_ps(x, _mm256_set1_ps(-0.5f), _CMP_GT_OQ);
    return _mm256_blendv_ps(far, p, near);
}

inline __m256 elu8(__m256 v) {
    const __m256 pos = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ);
    return _mm256_blendv_ps(expm1_neg_avx2(_mm256_min_ps(v, _mm256_setzero_ps())), v, pos);
}

void elu_avx2(const float* x, float* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, elu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float v[8] = {};
        std::memcpy(v, x + i, size_t(n - i) * sizeof(float));
        _mm256_store_ps(v, elu8(_mm256_load_ps(v)));
        std::memcpy(out + i, v, size_t(n - i) * sizeof(float));
    }
}

// x/2 (1 + tanh(u)) = x / (1 + exp(-2u)): one exp, no tanh. Far out the exp saturates (at its
// clamp) and the quotient goes to 0 or x, as the tanh form does.
inline __m256 gelu8(__m256 v) {
    const __m256 v3 = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), v3, v);
    const __m256 e = exp_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f), u));
    return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void gelu_tanh_avx2(float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float v[8] = {};
        std::memcpy(v, x + i, size_t(n - i) * sizeof(float));
        _mm256_store_ps(v, gelu8(_mm256_load_ps(v)));
        std::memcpy(x + i, v, size_t(n - i) * sizeof(float));
    }
}

const Kernels avx2{"avx2", f16_to_f32_avx2, f32_to_f16_avx2, axpy_avx2, elu_avx2, gelu_tanh_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &avx2; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace dasllama::cpu::ops
