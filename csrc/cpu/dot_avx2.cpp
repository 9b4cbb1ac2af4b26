// Dot products for AVX2 + FMA + F16C (built with DASLLAMA_ISA_FLAGS_avx2).
#include "cpu/dot.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::dot {
namespace {

using simd_x86::hsum;
using simd_x86::load_f16;

float f32_avx2(const float* a, const float* b, int64_t n) {
    // Four accumulators cover the FMA latency (4 cycles, 2 issued per cycle on recent cores).
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// 16 int8 pairs -> 8 int32 partial sums, exact: sign-extend to int16, multiply-add pairs.
// (The usual maddubs trick, |a| * sign(b, a), is wrong when b = -128 and a < 0, and Q8_0
// data may hold -128.)
__m256i mul_sum_i8(__m128i a, __m128i b) {
    return _mm256_madd_epi16(_mm256_cvtepi8_epi16(a), _mm256_cvtepi8_epi16(b));
}

float q8_0_avx2(const uint8_t* a, const uint8_t* b, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t blk = 0; blk < n / kQ8_0Block; ++blk, a += kQ8_0Bytes, b += kQ8_0Bytes) {
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2));
        const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
        const __m256i p = _mm256_add_epi32(
            mul_sum_i8(_mm256_castsi256_si128(qa), _mm256_castsi256_si128(qb)),
            mul_sum_i8(_mm256_extracti128_si256(qa, 1), _mm256_extracti128_si256(qb, 1)));
        // Lane sums are at most 4 * 2^14 = 2^16: exact in float.
        const __m256 d = _mm256_set1_ps(load_f16(a) * load_f16(b));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    return hsum(acc);
}

const Kernels table{"avx2", f32_avx2, q8_0_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &table; }

}  // namespace dasllama::cpu::dot
