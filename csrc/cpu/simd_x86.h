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

}  // namespace dasllama::cpu::simd_x86
