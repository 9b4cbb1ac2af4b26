// Dot products for AVX-512 F/BW/VL/DQ + VNNI (built with DASLLAMA_ISA_FLAGS_avx512).
#include "cpu/dot.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::dot {
namespace {

using simd_x86::hsum;
using simd_x86::load_f16;

// One row's four accumulators of f32_avx512, added together: the vector its result sums.
inline __m512 f32_lanes(const float* a, const float* b, int64_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
        acc2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), acc2);
        acc3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), acc3);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    if (i < n) {  // masked tail: masked-off lanes are neither read nor faulted on
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i),
                               acc1);
    }
    return _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3));
}

float f32_avx512(const float* a, const float* b, int64_t n) { return hsum(f32_lanes(a, b, n)); }

// Lanes l and l + h of x and y added, for the pairs hsum makes: 256-bit halves of two rows
// (lo: x's sums, hi: y's).
inline __m512 add_halves(__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
}

// Sixteen rows' f32_avx512 at once: their lane vectors reduced together with hsum's pairing
// (l with l + 8, then + 4, + 2, + 1), so each sum has its row's bits.
void f32_rows_avx512(const float* a, const float* rows, int64_t ld, int64_t n_rows, int64_t n,
                     float* out) {
    // after the four levels lane 4k + m holds row 4m + k
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    int64_t j = 0;
    for (; j + 16 <= n_rows; j += 16) {
        __m512 t[8];
        for (int m = 0; m < 8; ++m)   // rows 2m, 2m + 1: lanes l + 8 onto l
            t[m] = add_halves(f32_lanes(a, rows + (j + 2 * m) * ld, n),
                              f32_lanes(a, rows + (j + 2 * m + 1) * ld, n));
        __m512 u[4];
        for (int m = 0; m < 4; ++m)   // 128-bit blocks: lanes + 4 onto l; rows 4m..4m+3
            u[m] = _mm512_add_ps(
                _mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_f32x4(t[2 * m], t[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
        __m512 v[2];
        for (int m = 0; m < 2; ++m)   // lanes + 2 onto l
            v[m] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * m], u[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(u[2 * m], u[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_ps(out + j, _mm512_permutexvar_ps(order, w));
    }
    for (; j < n_rows; ++j) out[j] = f32_avx512(a, rows + j * ld, n);
}

// VNNI multiplies unsigned by signed bytes. a + 128 is unsigned (flip the top bit), and
// sum (a + 128) b - 128 sum b = sum a b, exactly, for every int8 a and b, -128 included.
// dpbusd does not saturate; lane sums stay below 2^17.
__m512i mul_sum_i8(__m512i a, __m512i b) {
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, _mm512_xor_si512(a, bias), b),
                            _mm512_dpbusd_epi32(zero, bias, b));
}

__m256i mul_sum_i8(__m256i a, __m256i b) {
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i zero = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, _mm256_xor_si256(a, bias), b),
                            _mm256_dpbusd_epi32(zero, bias, b));
}

__m256i load_quants(const uint8_t* block) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
}

// Two blocks' quants in one register: block 0 in the low half, block 1 in the high half.
__m512i load_quants2(const uint8_t* block) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(load_quants(block)),
                              load_quants(block + kQ8_0Bytes), 1);
}

float q8_0_avx512(const uint8_t* a, const uint8_t* b, int64_t n) {
    const int64_t nb = n / kQ8_0Block;
    __m512 acc = _mm512_setzero_ps();
    int64_t blk = 0;
    for (; blk + 2 <= nb; blk += 2, a += 2 * kQ8_0Bytes, b += 2 * kQ8_0Bytes) {
        const __m512i p = mul_sum_i8(load_quants2(a), load_quants2(b));
        const float d0 = load_f16(a) * load_f16(b);
        const float d1 = load_f16(a + kQ8_0Bytes) * load_f16(b + kQ8_0Bytes);
        const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1);
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    __m256 tail = _mm256_setzero_ps();
    if (blk < nb) {
        const __m256i p = mul_sum_i8(load_quants(a), load_quants(b));
        const __m256 d = _mm256_set1_ps(load_f16(a) * load_f16(b));
        tail = _mm256_mul_ps(d, _mm256_cvtepi32_ps(p));
    }
    // Insert into zeros: a plain cast would leave the upper half undefined.
    const __m512 tail512 = _mm512_insertf32x8(_mm512_setzero_ps(), tail, 0);
    return hsum(_mm512_add_ps(acc, tail512));
}

const Kernels table{"avx512", f32_avx512, q8_0_avx512, f32_rows_avx512};

}  // namespace

const Kernels* kernels_avx512() { return &table; }

}  // namespace dasllama::cpu::dot
