// Pieces shared by the AMX files (*_amx.cpp): the tile configuration every kernel loads, and
// float32 -> bfloat16 rounding (the scalar form also serves the generic files that pack
// bfloat16 operands).
//
// As in simd_x86.h, every function has internal linkage (static): the includers are built
// with different ISA flags, and one shared symbol could hand a file the copy built for another.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace dasllama::cpu::amx_x86 {

// float32 -> bfloat16, rounded to nearest even (finite inputs).
static inline uint16_t to_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
constexpr int64_t kTileElems = 16 * 32;   // bf16 values in one 16 x 64-byte tile

// The tile configuration in memory (palette 1), as _tile_loadconfig reads it.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// tmm0-7 all 16 rows of 64 bytes: the only shape the kernels use.
static inline void load_config() {
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

// 16 floats -> 16 bf16, rounded to nearest even (to_bf16 on each lane).
static inline __m256i to_bf16x16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
#endif

}  // namespace dasllama::cpu::amx_x86
