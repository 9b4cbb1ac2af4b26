// Small x86 helpers shared by the ISA files (*_avx2.cpp, *_avx512.cpp).
//
// Each includer is built with its own ISA flags, so every function here has internal linkage
// (static): an inline function with external linkage would be one symbol across those files,
// and the linker could hand an AVX2 kernel the copy compiled with AVX-512 instructions.
#pragma once

// GCC 12's AVX-512 headers build placeholder vectors by self-initialization and then warn
// about them (GCC bug 105593, fixed in 12.3): silence that for the header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace dasllama::cpu::simd_x86 {

// Sum of the 8 lanes: halves, then quarters, then the last pair.
static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#if defined(__AVX512F__)
// Sum of the 16 lanes: the two 256-bit halves added, then as above.
static inline float hsum(__m512 v) {
    const __m512 hi = _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(3, 2, 3, 2));
    return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(hi)));
}
#endif

// A block's f16 scale (unaligned, little-endian like x86 and the file), widened exactly,
// denormals included. Needs F16C.
static inline float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

#if defined(__AVX2__) && defined(__FMA__)
// exp(x) for x in [-87.3, 88.3] (clamped there): x = n ln2 + r with |r| <= ln2 / 2, a degree-6
// polynomial for exp(r) (Cephes expf: about 1 ulp), times 2^n built in the exponent bits.
static inline __m256 exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // ln2 split in two (0.693359375 is exact in a few bits): r = x - n ln2 without rounding loss
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// The erf GELU on 8 lanes: gelu_erf_avx512's operations (below), so both give the same bits.
static inline __m256 gelu_erf_avx2(__m256 x) {
    const __m256 a = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x),
                                   _mm256_set1_ps(0.70710678118654752f));
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.5f), a, _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(0.17087277f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
    const __m256 e = _mm256_mul_ps(t, exp_avx2(_mm256_fnmadd_ps(a, a, p)));
    const __m256 pos = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 c = _mm256_blendv_ps(e, _mm256_sub_ps(_mm256_set1_ps(2.0f), e), pos);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), c);
}
#endif

#if defined(__AVX512F__)
// exp_avx2's algorithm on 16 lanes, operation for operation: each lane's result equals
// exp_avx2's for the same input bit for bit.
static inline __m512 exp_avx512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// The erf GELU, x/2 erfc(-x / sqrt 2), on 16 lanes: erfc(a) for a >= 0 as
// t exp(-a^2 + P(t)), t = 1 / (1 + a/2), P of degree 9 (Numerical Recipes' erfcc, fractional
// error below 1.2e-7), and 2 - erfc(a) for x >= 0.
static inline __m512 gelu_erf_avx512(__m512 x) {
    const __m512 a = _mm512_mul_ps(_mm512_andnot_ps(_mm512_set1_ps(-0.0f), x),
                                   _mm512_set1_ps(0.70710678118654752f));
    const __m512 t = _mm512_div_ps(_mm512_set1_ps(1.0f),
                                   _mm512_fmadd_ps(_mm512_set1_ps(0.5f), a, _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_set1_ps(0.17087277f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
    const __m512 e = _mm512_mul_ps(t, exp_avx512(_mm512_fnmadd_ps(a, a, p)));
    const __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    const __m512 c = _mm512_mask_blend_ps(pos, e, _mm512_sub_ps(_mm512_set1_ps(2.0f), e));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), c);
}
#endif

}  // namespace dasllama::cpu::simd_x86
