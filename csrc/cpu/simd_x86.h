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
#endif

}  // namespace dasllama::cpu::simd_x86
