// The Snake kernel's AVX-512 pieces (snake.h), inline for the AVX-512 files that fuse Snake
// into a pass of their own (Kokoro's AdaIN + Snake): the same instructions give the same bits
// as snake_avx512.cpp's rows. Include only from files built with DASLLAMA_ISA_FLAGS_avx512.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace dasllama::nn::snake_avx512 {

constexpr float kReduceLimit = 1e5f;   // as snake_avx2.cpp: above it, sinf

// Rounding to an integer by adding and removing 1.5 * 2^23 (exact for |v| < 2^22, far above
// the reduction's limit); the shifted value's low mantissa bit is the integer's parity. (No
// conversion intrinsics: GCC 12's spell them with undefined vectors and warns.)
constexpr float kRoundShift = 12582912.0f;

inline __m512 sin_squared(__m512 x) {
    const __m512 shifted = _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.63661977236758134f)),
                                         _mm512_set1_ps(kRoundShift));
    const __m512 j = _mm512_sub_ps(shifted, _mm512_set1_ps(kRoundShift));
    __m512 r = _mm512_fnmadd_ps(j, _mm512_set1_ps(1.5707963705062866f), x);
    r = _mm512_fnmadd_ps(j, _mm512_set1_ps(-4.3711388286737929e-08f), r);
    r = _mm512_fnmadd_ps(j, _mm512_set1_ps(-1.7151245100059e-15f), r);
    const __m512 z = _mm512_mul_ps(r, r);
    __m512 s = _mm512_fmadd_ps(_mm512_set1_ps(-1.9515295891e-4f), z, _mm512_set1_ps(8.3321608736e-3f));
    s = _mm512_fmadd_ps(s, z, _mm512_set1_ps(-1.6666654611e-1f));
    s = _mm512_fmadd_ps(_mm512_mul_ps(s, z), r, r);
    __m512 c = _mm512_fmadd_ps(_mm512_set1_ps(2.443315711809948e-5f), z, _mm512_set1_ps(-1.388731625493765e-3f));
    c = _mm512_fmadd_ps(c, z, _mm512_set1_ps(4.166664568298827e-2f));
    c = _mm512_fmadd_ps(_mm512_mul_ps(c, z), z, _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z, _mm512_set1_ps(1.0f)));
    const __mmask16 odd = _mm512_test_epi32_mask(_mm512_castps_si512(shifted), _mm512_set1_epi32(1));
    const __m512 v = _mm512_mask_blend_ps(odd, s, c);
    return _mm512_mul_ps(v, v);
}

// The C library's sinf for lanes whose argument is past the reduction's limit (or NaN).
inline void row_scalar(float* x, int64_t n, float alpha, float inv_alpha) {
    for (int64_t i = 0; i < n; ++i) {
        const float s = std::sin(alpha * x[i]);
        x[i] = x[i] + inv_alpha * (s * s);
    }
}

// Snake of the lanes m of v (alpha and 1 / alpha broadcast), stored at x; lanes whose
// |alpha x| reaches the limit (or is NaN) take row_scalar. v holds x's lanes m.
inline void store_snake(float* x, __mmask16 m, int64_t lanes, __m512 v, __m512 a, __m512 ia,
                        float alpha, float inv_alpha) {
    const __m512 ax = _mm512_mul_ps(a, v);
    const __m512 abs_ax = _mm512_castsi512_ps(
        _mm512_and_epi32(_mm512_castps_si512(ax), _mm512_set1_epi32(0x7fffffff)));
    if (_mm512_mask_cmp_ps_mask(m, abs_ax, _mm512_set1_ps(kReduceLimit), _CMP_NLT_UQ)) {
        _mm512_mask_storeu_ps(x, m, v);
        row_scalar(x, lanes, alpha, inv_alpha);
        return;
    }
    _mm512_mask_storeu_ps(x, m, _mm512_fmadd_ps(ia, sin_squared(ax), v));
}

}  // namespace dasllama::nn::snake_avx512
#endif
