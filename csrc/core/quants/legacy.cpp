// The legacy 32-element formats: one f16 scale d per block (and an f16 offset m for the _1
// kinds). Element j of a block (j < 16) sits in the low nibble of qs[j], element j + 16 in
// the high nibble; the 5-bit kinds keep bit 4 of element j in bit j of a little-endian
// 32-bit word qh.
//
//   Q4_0  18 bytes: d, qs[16]            y = (q - 8) * d
//   Q4_1  20 bytes: d, m, qs[16]         y = q * d + m
//   Q5_0  22 bytes: d, qh[4], qs[16]     y = (q - 16) * d
//   Q5_1  24 bytes: d, m, qh[4], qs[16]  y = q * d + m
//   Q8_0  34 bytes: d, int8 qs[32]       y = q * d
//
// Dequantization follows ggml's float32 operation order: the integer level is converted to
// float and multiplied by d (then m is added). Quantization is bit-identical to ggml's
// quantize_row_*_ref:
//   Q4_0, Q5_0: d = v / -8 (-16), v the first element of largest magnitude (sign kept);
//     id = d ? 1/d : 0 from the float32 d (not the stored f16); q = min(15 (31),
//     trunc(x * id + 8.5 (16.5))).
//   Q4_1, Q5_1: d = (max - min) / 15 (31), m = min; q = trunc((x - min) * id + 0.5),
//     clamped to 15 (31).
//   Q8_0: d = amax / 127; q = roundf(x * id), ties away from zero.
// The float rounding helpers (block_io.h) clamp before converting, which only changes what
// happens for NaN or infinite input (undefined in ggml).
#include <cmath>

#include "core/quants/block_io.h"
#include "core/quants/quants.h"

namespace dasllama::quants {

namespace {

constexpr int kBlock = 32;
constexpr int kHalf = kBlock / 2;

// The first element of largest magnitude, with its sign (ggml's `max` of the _0 kinds).
float signed_absmax(const float* x) {
    float amax = 0.0f, value = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            value = x[j];
        }
    }
    return value;
}

void min_max(const float* x, float* lo, float* hi) {
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kBlock; ++j) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    *lo = mn;
    *hi = mx;
}

float inverse_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Levels 0..15 (low nibbles) of a block into qs[16].
void pack_nibbles(const int* levels, uint8_t* qs) {
    for (int j = 0; j < kHalf; ++j)
        qs[j] = static_cast<uint8_t>((levels[j] & 0x0f) | ((levels[j + kHalf] & 0x0f) << 4));
}

// Bit 4 of each of the 32 levels into the little-endian word qh.
void pack_high_bits(const int* levels, uint8_t* qh) {
    uint32_t bits = 0;
    for (int j = 0; j < kBlock; ++j) bits |= static_cast<uint32_t>((levels[j] >> 4) & 1) << j;
    store_u32(qh, bits);
}

// The 4-bit (or 5-bit with qh) unsigned levels of a block, before any offset.
void unpack_levels(const uint8_t* qs, const uint8_t* qh, int* levels) {
    const uint32_t high = qh ? load_u32(qh) : 0;
    for (int j = 0; j < kHalf; ++j) {
        levels[j] = (qs[j] & 0x0f) | static_cast<int>(((high >> j) & 1) << 4);
        levels[j + kHalf] = (qs[j] >> 4) | static_cast<int>(((high >> (j + kHalf)) & 1) << 4);
    }
}

// --- symmetric kinds (Q4_0, Q5_0): y = (q - offset) * d ---

void dequantize_symmetric(const uint8_t* src, float* dst, int64_t n, int block_bytes,
                          bool has_qh, int offset) {
    int levels[kBlock];
    for (int64_t b = 0; b < n / kBlock; ++b, src += block_bytes, dst += kBlock) {
        const float d = load_f16(src);
        unpack_levels(src + (has_qh ? 6 : 2), has_qh ? src + 2 : nullptr, levels);
        for (int j = 0; j < kBlock; ++j) dst[j] = static_cast<float>(levels[j] - offset) * d;
    }
}

void quantize_symmetric(const float* src, uint8_t* dst, int64_t n, int block_bytes,
                        bool has_qh, int offset) {
    const int top = 2 * offset - 1;
    const float bias = static_cast<float>(offset) + 0.5f;  // 8.5 or 16.5
    int levels[kBlock];
    for (int64_t b = 0; b < n / kBlock; ++b, src += kBlock, dst += block_bytes) {
        const float d = signed_absmax(src) / static_cast<float>(-offset);
        const float id = inverse_or_zero(d);
        store_f16(dst, d);
        for (int j = 0; j < kBlock; ++j) levels[j] = trunc_clamped(src[j] * id + bias, 0, top);
        if (has_qh) pack_high_bits(levels, dst + 2);
        pack_nibbles(levels, dst + (has_qh ? 6 : 2));
    }
}

// --- offset kinds (Q4_1, Q5_1): y = q * d + m ---

void dequantize_offset(const uint8_t* src, float* dst, int64_t n, int block_bytes, bool has_qh) {
    int levels[kBlock];
    for (int64_t b = 0; b < n / kBlock; ++b, src += block_bytes, dst += kBlock) {
        const float d = load_f16(src);
        const float m = load_f16(src + 2);
        unpack_levels(src + (has_qh ? 8 : 4), has_qh ? src + 4 : nullptr, levels);
        for (int j = 0; j < kBlock; ++j) dst[j] = static_cast<float>(levels[j]) * d + m;
    }
}

void quantize_offset(const float* src, uint8_t* dst, int64_t n, int block_bytes, bool has_qh,
                     int top) {
    int levels[kBlock];
    for (int64_t b = 0; b < n / kBlock; ++b, src += kBlock, dst += block_bytes) {
        float lo, hi;
        min_max(src, &lo, &hi);
        const float d = (hi - lo) / static_cast<float>(top);
        const float id = inverse_or_zero(d);
        store_f16(dst, d);
        store_f16(dst + 2, lo);
        for (int j = 0; j < kBlock; ++j)
            levels[j] = trunc_clamped((src[j] - lo) * id + 0.5f, 0, top);
        if (has_qh) pack_high_bits(levels, dst + 4);
        pack_nibbles(levels, dst + (has_qh ? 8 : 4));
    }
}

}  // namespace

void dequantize_q4_0(const uint8_t* src, float* dst, int64_t n) {
    dequantize_symmetric(src, dst, n, 18, false, 8);
}
void quantize_q4_0(const float* src, uint8_t* dst, int64_t n) {
    quantize_symmetric(src, dst, n, 18, false, 8);
}

void dequantize_q5_0(const uint8_t* src, float* dst, int64_t n) {
    dequantize_symmetric(src, dst, n, 22, true, 16);
}
void quantize_q5_0(const float* src, uint8_t* dst, int64_t n) {
    quantize_symmetric(src, dst, n, 22, true, 16);
}

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n) {
    dequantize_offset(src, dst, n, 20, false);
}
void quantize_q4_1(const float* src, uint8_t* dst, int64_t n) {
    quantize_offset(src, dst, n, 20, false, 15);
}

void dequantize_q5_1(const uint8_t* src, float* dst, int64_t n) {
    dequantize_offset(src, dst, n, 24, true);
}
void quantize_q5_1(const float* src, uint8_t* dst, int64_t n) {
    quantize_offset(src, dst, n, 24, true, 31);
}

// Q8_0: 34 bytes, f16 d then 32 signed bytes.
void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, src += 34, dst += kBlock) {
        const float d = load_f16(src);
        for (int j = 0; j < kBlock; ++j)
            dst[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
    }
}

void quantize_q8_0(const float* src, uint8_t* dst, int64_t n) {
    for (int64_t b = 0; b < n / kBlock; ++b, src += kBlock, dst += 34) {
        float amax = 0.0f;
        for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(src[j]));
        const float d = amax / 127.0f;
        const float id = inverse_or_zero(d);
        store_f16(dst, d);
        for (int j = 0; j < kBlock; ++j)
            dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(round_away_clamped(src[j] * id, -127, 127)));
    }
}

}  // namespace dasllama::quants
