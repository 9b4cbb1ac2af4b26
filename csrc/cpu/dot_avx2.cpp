// Dot products for AVX2 + FMA + F16C (built with DASLLAMA_ISA_FLAGS_avx2).
#include "cpu/dot.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::dot {
namespace {

using simd_x86::hsum;
using simd_x86::load_f16;

// One row's four accumulators of f32_avx2 over its whole 8-float groups, added together.
inline __m256 f32_lanes(const float* a, const float* b, int64_t n) {
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
    return _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
}

float f32_avx2(const float* a, const float* b, int64_t n) {
    float s = hsum(f32_lanes(a, b, n));
    for (int64_t i = n / 8 * 8; i < n; ++i) s += a[i] * b[i];
    return s;
}

// Eight rows' f32_avx2 at once, their lane vectors reduced together with hsum's pairing (l
// with l + 4, then + 2, + 1). Lengths with a scalar tail go row by row.
void f32_rows_avx2(const float* a, const float* rows, int64_t ld, int64_t n_rows, int64_t n,
                   float* out) {
    int64_t j = 0;
    if (n % 8 == 0) {
        // after the three levels lane 4b + p holds row 2p + b
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (; j + 8 <= n_rows; j += 8) {
            __m256 t[4];
            for (int m = 0; m < 4; ++m) {   // rows 2m, 2m + 1: lanes + 4 onto l
                const __m256 x = f32_lanes(a, rows + (j + 2 * m) * ld, n);
                const __m256 y = f32_lanes(a, rows + (j + 2 * m + 1) * ld, n);
                t[m] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20),
                                     _mm256_permute2f128_ps(x, y, 0x31));
            }
            __m256 u[2];
            for (int m = 0; m < 2; ++m)   // lanes + 2 onto l
                u[m] = _mm256_add_ps(
                    _mm256_shuffle_ps(t[2 * m], t[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm256_shuffle_ps(t[2 * m], t[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
            const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                           _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
            _mm256_storeu_ps(out + j, _mm256_permutevar8x32_ps(w, order));
        }
    }
    for (; j < n_rows; ++j) out[j] = f32_avx2(a, rows + j * ld, n);
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

const Kernels table{"avx2", f32_avx2, q8_0_avx2, f32_rows_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &table; }

}  // namespace dasllama::cpu::dot
