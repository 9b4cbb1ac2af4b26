// The dispatched ops kernels for AVX2 + FMA + F16C (built with DASLLAMA_ISA_FLAGS_avx2): half
// conversions of KV cache rows and the attention's weighted sum of values.
#include <immintrin.h>

#include "core/formats.h"
#include "cpu/ops.h"

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

const Kernels avx2{"avx2", f16_to_f32_avx2, f32_to_f16_avx2, axpy_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &avx2; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace dasllama::cpu::ops
