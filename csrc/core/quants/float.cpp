// Plain float formats: F32 (4 bytes, IEEE binary32), F16 (2 bytes, IEEE binary16) and BF16
// (2 bytes, the top half of a binary32), all little-endian, one element per "block".
//
// The scalar conversions are done on bits, so they are exact and need no FPU mode:
//   f16 -> f32 and bf16 -> f32 are exact widenings (subnormals, infinities, NaN payloads).
//   f32 -> f16 rounds to nearest, ties to even; values from 65520 up become infinity; results
//     below 2^-14 become f16 subnormals (rounded, not flushed). A NaN stays a NaN with the
//     top 10 bits of its payload and the quiet bit set (what x86 F16C does; for the usual
//     quiet NaN 0x7fc00000 this is 0x7e00, as in ggml and NumPy).
//   f32 -> bf16 is ggml's rule: a NaN keeps its top bits and is forced quiet ((bits >> 16) |
//     0x40); everything else rounds to nearest even on the 16 dropped bits, so FLT_MAX rounds
//     to infinity and subnormals are rounded, not flushed.
#include <cstring>

#include "core/quants/block_io.h"
#include "core/quants/quants.h"

namespace dasllama {

namespace {

uint32_t float_bits(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

float bits_float(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

// Rounds m >> shift to nearest, ties to even.
uint32_t shift_round_even(uint32_t m, int shift) {
    const uint32_t kept = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    return kept + ((rest > half || (rest == half && (kept & 1))) ? 1 : 0);
}

}  // namespace

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    const uint32_t exponent = (h >> 10) & 0x1f;
    const uint32_t mantissa = h & 0x3ff;
    if (exponent == 0x1f) return bits_float(sign | 0x7f800000 | (mantissa << 13));  // inf, NaN
    if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
    if (mantissa == 0) return bits_float(sign);  // +-0
    // Subnormal: mantissa * 2^-24, normal in binary32. Normalize the leading one.
    int e = 113;  // biased binary32 exponent of 2^-14
    uint32_t m = mantissa;
    while (!(m & 0x400)) {
        m <<= 1;
        --e;
    }
    return bits_float(sign | (static_cast<uint32_t>(e) << 23) | ((m & 0x3ff) << 13));
}

uint16_t f32_to_f16(float f) {
    const uint32_t bits = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
    const uint32_t magnitude = bits & 0x7fffffff;
    if (magnitude > 0x7f800000)  // NaN: keep the payload's top bits, force quiet
        return static_cast<uint16_t>(sign | 0x7e00 | ((magnitude & 0x7fffff) >> 13));
    if (magnitude >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
    if (magnitude >= 0x38800000) {                       // >= 2^-14: a normal f16
        // Rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 bits; a carry
        // out of the mantissa correctly bumps the exponent.
        const uint32_t rebiased = magnitude - (static_cast<uint32_t>(127 - 15) << 23);
        return static_cast<uint16_t>(sign | shift_round_even(rebiased, 13));
    }
    if (magnitude < 0x33000000) return sign;  // below 2^-25 (ties at 2^-25 also go to 0 below)
    // Subnormal result in units of 2^-24: the full 24-bit significand shifted right.
    const uint32_t exponent = magnitude >> 23;  // 102..112
    const uint32_t significand = (magnitude & 0x7fffff) | 0x800000;
    return static_cast<uint16_t>(sign | shift_round_even(significand, 126 - static_cast<int>(exponent)));
}

float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_bf16(float f) {
    const uint32_t bits = float_bits(f);
    if ((bits & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((bits >> 16) | 0x40);
    return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

namespace quants {

void dequantize_f32(const uint8_t* src, float* dst, int64_t n) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

void quantize_f32(const float* src, uint8_t* dst, int64_t n) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
}

void dequantize_f16(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
}

void quantize_f16(const float* src, uint8_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_f16(src[i]));
}

void dequantize_bf16(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
}

void quantize_bf16(const float* src, uint8_t* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_bf16(src[i]));
}

}  // namespace quants

}  // namespace dasllama
