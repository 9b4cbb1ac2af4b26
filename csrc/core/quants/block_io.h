// Private helpers of the converters in core/quants/: little-endian field access inside a
// block (no alignment assumed) and the rounding primitives the quantizers share.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/formats.h"

namespace dasllama::quants {

inline uint16_t load_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
}

inline uint32_t load_u32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

inline void store_u16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
}

inline void store_u32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

inline float load_f32(const uint8_t* p) {
    const uint32_t bits = load_u32(p);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline void store_f32(uint8_t* p, float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    store_u32(p, bits);
}

// A block's f16 scale, widened exactly.
inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }
inline void store_f16(uint8_t* p, float f) { store_u16(p, f32_to_f16(f)); }

// Float to int for a value the caller has already bounded; NaN becomes lo, so malformed
// input (NaN, inf) never reaches an out-of-range conversion. Finite in-range values
// convert exactly as C's cast would.
inline float clamp_float(float v, float lo, float hi) {
    if (!(v >= lo)) return lo;  // also NaN
    return v > hi ? hi : v;
}

// C's (int) cast: truncation toward zero, of v clamped to [lo, hi].
inline int trunc_clamped(float v, int lo, int hi) {
    return static_cast<int>(clamp_float(v, static_cast<float>(lo), static_cast<float>(hi)));
}

// Round half to even, clamped to [lo, hi] (|lo|, |hi| < 2^22). Adding and subtracting
// 1.5 * 2^23 leaves the value rounded to an integer by the FPU's default round-to-nearest-even,
// as ggml's nearest_int does; it is exact for |v| < 2^22 and avoids a libm call.
inline int round_even_clamped(float v, int lo, int hi) {
    const float magic = 12582912.0f;
    const float clamped = clamp_float(v, static_cast<float>(lo), static_cast<float>(hi));
    return static_cast<int>((clamped + magic) - magic);
}

// Round half away from zero (C's roundf), clamped to [lo, hi].
inline int round_away_clamped(float v, int lo, int hi) {
    return static_cast<int>(std::round(clamp_float(v, static_cast<float>(lo),
                                                  static_cast<float>(hi))));
}

}  // namespace dasllama::quants
