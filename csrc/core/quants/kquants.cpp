// The k-quant formats: 256-element super-blocks split into sub-blocks of 16 or 32 elements,
// each with a small integer scale (and min) relative to f16 super-block scales.
//
// Dequantization follows the float32 operation order of ggml's dequantize_row_* exactly
// (integers are converted to float first, then multiplied as written), so it is bit for bit
// equal to any implementation that does the same. Quantization of Q4_K, Q5_K and Q6_K is this
// project's own search (see the section "quantizers" below), not ggml's bit pattern; Q8_K
// quantization is ggml's reference rule.
#include <cmath>
#include <cstring>

#include "core/quants/block_io.h"
#include "core/quants/quants.h"

namespace dasllama::quants {

namespace {

constexpr int kSuper = 256;

// =============================================================================================
// Q2_K, 84 bytes: scales[16] (low nibble: scale, high nibble: min), qs[64] (2 bits each),
// d (f16), dmin (f16). Element e = 128h + 32s + 16t + l (h < 2, s < 4, t < 2, l < 16) is
// bits 2s..2s+1 of qs[32h + 16t + l]; its sub-block is e / 16.
//   dl = d * (sc & 15); ml = dmin * (sc >> 4); y = dl * q - ml
// =============================================================================================
void dequantize_q2_k_block(const uint8_t* block, float* y) {
    const uint8_t* scales = block;
    const uint8_t* qs = block + 16;
    const float d = load_f16(block + 80);
    const float dmin = load_f16(block + 82);
    for (int sub = 0; sub < 16; ++sub) {
        const float dl = d * static_cast<float>(scales[sub] & 0x0f);
        const float ml = dmin * static_cast<float>(scales[sub] >> 4);
        for (int l = 0; l < 16; ++l) {
            const int e = 16 * sub + l;
            const int h = e / 128, s = (e / 32) % 4, t = (e / 16) % 2;
            const int q = (qs[32 * h + 16 * t + l] >> (2 * s)) & 3;
            y[e] = dl * static_cast<float>(q) - ml;
        }
    }
}

// =============================================================================================
// Q3_K, 110 bytes: hmask[32], qs[64] (low 2 bits, placed as in Q2_K), scales[12] (sixteen
// 6-bit values), d (f16). The high bit of element e is bit e / 32 of hmask[e % 32]; a clear
// high bit subtracts 4, so q is in -4..3. Scale j: low 4 bits from scales[j] (j < 8) or
// scales[j - 8] >> 4, high 2 bits from scales[8 + j % 4] >> (2 * (j / 4)); it is stored +32.
//   dl = d * (scale - 32); y = dl * q
// =============================================================================================
int q3_k_scale(const uint8_t* scales, int j) {
    const int low = j < 8 ? (scales[j] & 0x0f) : (scales[j - 8] >> 4);
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | (high << 4)) - 32;
}

void dequantize_q3_k_block(const uint8_t* block, float* y) {
    const uint8_t* hmask = block;
    const uint8_t* qs = block + 32;
    const uint8_t* scales = block + 96;
    const float d = load_f16(block + 108);
    for (int sub = 0; sub < 16; ++sub) {
        const float dl = d * static_cast<float>(q3_k_scale(scales, sub));
        for (int l = 0; l < 16; ++l) {
            const int e = 16 * sub + l;
            const int h = e / 128, s = (e / 32) % 4, t = (e / 16) % 2;
            const int low = (qs[32 * h + 16 * t + l] >> (2 * s)) & 3;
            const bool high = (hmask[e % 32] >> (e / 32)) & 1;
            y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
        }
    }
}

// =============================================================================================
// Scales of Q4_K and Q5_K: 12 bytes holding eight 6-bit scales and eight 6-bit mins.
// j < 4: scale = s[j] & 63, min = s[j + 4] & 63. j >= 4: scale = (s[j + 4] & 15) |
// ((s[j - 4] >> 6) << 4), min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4).
// =============================================================================================
void k4_scale_min(const uint8_t* s, int j, int* scale, int* min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

void k4_pack_scales_mins(const int* scales, const int* mins, uint8_t* s) {
    std::memset(s, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] = static_cast<uint8_t>(scales[j]);
            s[j + 4] = static_cast<uint8_t>(mins[j]);
        } else {
            s[j + 4] = static_cast<uint8_t>((scales[j] & 0x0f) | ((mins[j] & 0x0f) << 4));
            s[j - 4] |= static_cast<uint8_t>((scales[j] >> 4) << 6);
            s[j] |= static_cast<uint8_t>((mins[j] >> 4) << 6);
        }
    }
}

// =============================================================================================
// Q4_K, 144 bytes: d (f16), dmin (f16), scales[12], qs[128]. Sub-block j (32 elements) is the
// low (j even) or high (j odd) nibbles of qs[32 * (j / 2) .. + 32].
//   d1 = d * scale; m1 = dmin * min; y = d1 * q - m1
// Q5_K, 176 bytes: d, dmin, scales[12], qh[32], qs[128]: as Q4_K, plus bit j of qh[l] is
// bit 4 of element l of sub-block j.
//   y = d1 * (q + 16 * high) - m1
// =============================================================================================
void dequantize_q45_k_block(const uint8_t* block, float* y, bool five_bit) {
    const float d = load_f16(block);
    const float dmin = load_f16(block + 2);
    const uint8_t* scales = block + 4;
    const uint8_t* qh = block + 16;
    const uint8_t* qs = block + (five_bit ? 48 : 16);
    for (int sub = 0; sub < 8; ++sub) {
        int sc, m;
        k4_scale_min(scales, sub, &sc, &m);
        const float d1 = d * static_cast<float>(sc);
        const float m1 = dmin * static_cast<float>(m);
        const uint8_t* q = qs + 32 * (sub / 2);
        const int shift = 4 * (sub % 2);
        for (int l = 0; l < 32; ++l) {
            int level = (q[l] >> shift) & 0x0f;
            if (five_bit && ((qh[l] >> sub) & 1)) level += 16;
            y[32 * sub + l] = d1 * static_cast<float>(level) - m1;
        }
    }
}

// =============================================================================================
// Q6_K, 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], d (f16).
// Element e = 128h + 32g + l (h < 2, g < 4, l < 32): low bits are nibble g / 2 of
// ql[64h + 32(g % 2) + l], high bits are bits 2g..2g+1 of qh[32h + l]; q = that - 32.
//   y = d * scale * q, evaluated (d * scale) * q
// =============================================================================================
int q6_k_level(const uint8_t* ql, const uint8_t* qh, int e) {
    const int h = e / 128, g = (e / 32) % 4, l = e % 32;
    const int low = (ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0x0f;
    const int high = (qh[32 * h + l] >> (2 * g)) & 3;
    return (low | (high << 4)) - 32;
}

void dequantize_q6_k_block(const uint8_t* block, float* y) {
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const int8_t* scales = reinterpret_cast<const int8_t*>(block + 192);
    const float d = load_f16(block + 208);
    for (int e = 0; e < kSuper; ++e) {
        const float ds = d * static_cast<float>(scales[e / 16]);
        y[e] = ds * static_cast<float>(q6_k_level(ql, qh, e));
    }
}

// =============================================================================================
// Q8_K, 292 bytes: d (f32), int8 qs[256], int16 bsums[16] (sum of each 16 quants).
//   y = d * q
// =============================================================================================
void dequantize_q8_k_block(const uint8_t* block, float* y) {
    const float d = load_f32(block);
    for (int e = 0; e < kSuper; ++e) y[e] = d * static_cast<float>(static_cast<int8_t>(block[4 + e]));
}

// =============================================================================================
// Quantizers (this project's own, not ggml's bit pattern).
//
// Q4_K / Q5_K: each 32-element sub-block is fitted as x ~ scale * L - min (L in 0..nmax,
// min >= 0) by trying 9 trial step sizes (max - min) / (nmax + k/4), |k| <= 4; for each, the
// levels are rounded, then (scale, min) are refitted by least squares and the levels
// reassigned, twice; the fit of least squared error wins. The eight scales and mins are then
// coded in 6 bits against d = max scale / 63 and dmin = max min / 63 (stored f16, rounded away
// from zero so the largest code fits), and each sub-block tries its codes +-1 with requantized
// levels, keeping the pair of least error.
//
// Q6_K: each 16-element sub-block is fitted as x ~ scale * L (L in -32..31) by trying 9 trial
// steps v / -(32 + k/4), v the element of largest magnitude (it lands on the roomier -32
// side), each with two least-squares refits and reassignments; scales are coded in int8
// against d = v' / -128 (v' the largest-magnitude scale; f16, rounded away from zero), each
// trying its code +-1 with requantized levels.
//
// Cost: about 120 ns (Q4_K, Q5_K) and 55 ns (Q6_K) per element on one x86-64 core.
//
// Expected error, rms(x - y) / rms(x) on N(0, 1) data (tests/cpp/test_formats measures it):
// Q4_K 0.070, Q5_K 0.035, Q6_K 0.017. ggml's quantize_row_q*_K_ref measured on the same data
// gives 0.071, 0.036, 0.018 (on Laplace data 0.085 / 0.043 / 0.022 against our 0.083 / 0.041 /
// 0.021): this search minimizes plain squared error, ggml's weights large values more. The
// bound this code promises, and the test holds it to, is 1.4x ggml's error.
// =============================================================================================

// Stores a super-block scale as f16, rounded away from zero rather than to nearest, so the
// largest sub-block scale still fits its code range after the rounding (matters when the f16
// scale is subnormal and coarse). Returns the stored value.
float store_f16_scale(uint8_t* field, float value) {
    uint16_t h = f32_to_f16(value);
    if (std::fabs(f16_to_f32(h)) < std::fabs(value) && (h & 0x7fff) < 0x7bff) ++h;
    store_u16(field, h);
    return f16_to_f32(h);
}

struct AffineFit {
    float scale = 0.0f;  // step between levels, >= 0
    float min = 0.0f;    // subtracted offset, >= 0 (y = scale * L - min)
};

// Levels of x for a given affine map, and the squared error they leave.
float assign_affine(const float* x, int n, int nmax, float scale, float min, int* L) {
    float err = 0.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int i = 0; i < n; ++i) {
        L[i] = round_even_clamped((x[i] + min) * inv, 0, nmax);
        const float diff = scale * static_cast<float>(L[i]) - min - x[i];
        err += diff * diff;
    }
    return err;
}

// Least-squares (scale, min) for fixed levels, with min kept >= 0. False when degenerate.
bool refit_affine(const float* x, int n, const int* L, AffineFit* fit) {
    double sl = 0, sl2 = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
        sl += L[i];
        sl2 += static_cast<double>(L[i]) * L[i];
        sx += x[i];
        sxl += static_cast<double>(x[i]) * L[i];
    }
    const double det = n * sl2 - sl * sl;
    if (det <= 0) return false;
    double scale = (n * sxl - sx * sl) / det;
    double offset = (sl2 * sx - sl * sxl) / det;  // y = scale * L + offset
    if (offset > 0) {
        offset = 0;
        scale = sxl / sl2;
    }
    if (scale <= 0) return false;
    fit->scale = static_cast<float>(scale);
    fit->min = static_cast<float>(-offset);
    return true;
}

AffineFit fit_affine(const float* x, int n, int nmax) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; ++i) {
        lo = std::fmin(lo, x[i]);
        hi = std::fmax(hi, x[i]);
    }
    AffineFit best;
    best.min = -lo;
    if (!(hi > lo)) return best;  // constant (<= 0) block: y = -min

    int L[32];
    best.scale = (hi - lo) / static_cast<float>(nmax);
    float best_err = assign_affine(x, n, nmax, best.scale, best.min, L);
    for (int trial = -4; trial <= 4; ++trial) {
        AffineFit fit;
        fit.scale = (hi - lo) / (static_cast<float>(nmax) + 0.25f * static_cast<float>(trial));
        fit.min = -lo;
        assign_affine(x, n, nmax, fit.scale, fit.min, L);
        for (int round = 0; round < 2; ++round) {
            if (!refit_affine(x, n, L, &fit)) break;
            const float err = assign_affine(x, n, nmax, fit.scale, fit.min, L);
            if (err < best_err) {
                best_err = err;
                best = fit;
            }
        }
    }
    return best;
}

// Requantizes a sub-block with its coded scale and min (as the dequantizer will see them) and
// returns the squared error.
float requantize_affine(const float* x, int n, int nmax, float d1, float m1, int* L) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
        L[i] = d1 > 0.0f ? round_even_clamped((x[i] + m1) / d1, 0, nmax) : 0;
        const float diff = d1 * static_cast<float>(L[i]) - m1 - x[i];
        err += diff * diff;
    }
    return err;
}

int code_6bit(float value, float unit) {
    return unit > 0.0f ? round_even_clamped(value / unit, 0, 63) : 0;
}

// One Q4_K / Q5_K super-block: fills d, dmin, the packed scales and the 256 levels.
void quantize_q45_k_super(const float* x, int nmax, uint8_t* header, int* levels) {
    AffineFit fits[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int sub = 0; sub < 8; ++sub) {
        fits[sub] = fit_affine(x + 32 * sub, 32, nmax);
        max_scale = std::fmax(max_scale, fits[sub].scale);
        max_min = std::fmax(max_min, fits[sub].min);
    }
    const float d = store_f16_scale(header, max_scale / 63.0f);
    const float dmin = store_f16_scale(header + 2, max_min / 63.0f);

    int scale_codes[8], min_codes[8], trial_levels[32];
    for (int sub = 0; sub < 8; ++sub) {
        const float* xs = x + 32 * sub;
        const int sc0 = code_6bit(fits[sub].scale, d), m0 = code_6bit(fits[sub].min, dmin);
        scale_codes[sub] = sc0;  // kept if every trial is NaN (non-finite input)
        min_codes[sub] = m0;
        std::memset(levels + 32 * sub, 0, sizeof(trial_levels));
        float best_err = INFINITY;
        for (int sc = sc0 - 1; sc <= sc0 + 1; ++sc) {
            for (int m = m0 - 1; m <= m0 + 1; ++m) {
                if (sc < 0 || sc > 63 || m < 0 || m > 63) continue;
                const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
                const float err = requantize_affine(xs, 32, nmax, d1, m1, trial_levels);
                if (err < best_err) {
                    best_err = err;
                    scale_codes[sub] = sc;
                    min_codes[sub] = m;
                    std::memcpy(levels + 32 * sub, trial_levels, sizeof(trial_levels));
                }
            }
        }
    }
    k4_pack_scales_mins(scale_codes, min_codes, header + 4);
}

// Symmetric fit of a 16-element sub-block for Q6_K: x ~ scale * L, L in -32..31.
float fit_symmetric(const float* x, int n) {
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
        }
    }
    if (!(amax > 0.0f)) return 0.0f;
    float best_scale = vmax / -32.0f;
    double best_score = -1.0;  // (sum x L)^2 / sum L^2: larger is smaller error
    for (int trial = -4; trial <= 4; ++trial) {
        float scale = vmax / -(32.0f + 0.25f * static_cast<float>(trial));
        for (int round = 0; round < 2; ++round) {
            const float inv = 1.0f / scale;
            double sxl = 0, sl2 = 0;
            for (int i = 0; i < n; ++i) {
                const int l = round_even_clamped(x[i] * inv, -32, 31);
                sxl += static_cast<double>(x[i]) * l;
                sl2 += static_cast<double>(l) * l;
            }
            if (sl2 <= 0) break;
            const double score = sxl * sxl / sl2;
            scale = static_cast<float>(sxl / sl2);
            if (score > best_score) {
                best_score = score;
                best_scale = scale;
            }
            if (scale == 0.0f) break;
        }
    }
    return best_scale;
}

float requantize_symmetric(const float* x, int n, float ds, int* L) {
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
        L[i] = ds != 0.0f ? round_even_clamped(x[i] / ds, -32, 31) : 0;
        const float diff = ds * static_cast<float>(L[i]) - x[i];
        err += diff * diff;
    }
    return err;
}

// One Q6_K super-block: returns d (f16 bits written by the caller), the int8 scale codes and
// the 256 levels in -32..31.
void quantize_q6_k_super(const float* x, uint8_t* d_field, int8_t* scale_codes, int* levels) {
    float scales[16];
    float amax = 0.0f, vmax = 0.0f;
    for (int sub = 0; sub < 16; ++sub) {
        scales[sub] = fit_symmetric(x + 16 * sub, 16);
        if (std::fabs(scales[sub]) > amax) {
            amax = std::fabs(scales[sub]);
            vmax = scales[sub];
        }
    }
    const float d = store_f16_scale(d_field, amax > 0.0f ? vmax / -128.0f : 0.0f);  // +0 if zero

    int trial_levels[16];
    for (int sub = 0; sub < 16; ++sub) {
        const float* xs = x + 16 * sub;
        const int c0 = d != 0.0f ? round_even_clamped(scales[sub] / d, -128, 127) : 0;
        scale_codes[sub] = static_cast<int8_t>(c0);  // kept if every trial is NaN
        std::memset(levels + 16 * sub, 0, sizeof(trial_levels));
        float best_err = INFINITY;
        for (int c = c0 - 1; c <= c0 + 1; ++c) {
            if (c < -128 || c > 127) continue;
            const float ds = d * static_cast<float>(c);
            const float err = requantize_symmetric(xs, 16, ds, trial_levels);
            if (err < best_err) {
                best_err = err;
                scale_codes[sub] = static_cast<int8_t>(c);
                std::memcpy(levels + 16 * sub, trial_levels, sizeof(trial_levels));
            }
        }
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

void dequantize_q2_k(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b) dequantize_q2_k_block(src + 84 * b, dst + kSuper * b);
}

void dequantize_q3_k(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b) dequantize_q3_k_block(src + 110 * b, dst + kSuper * b);
}

void dequantize_q4_k(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b)
        dequantize_q45_k_block(src + 144 * b, dst + kSuper * b, false);
}

void dequantize_q5_k(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b)
        dequantize_q45_k_block(src + 176 * b, dst + kSuper * b, true);
}

void dequantize_q6_k(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b) dequantize_q6_k_block(src + 210 * b, dst + kSuper * b);
}

void dequantize_q8_k(const uint8_t* src, float* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b) dequantize_q8_k_block(src + 292 * b, dst + kSuper * b);
}

void quantize_q4_k(const float* src, uint8_t* dst, int64_t n) {
    int levels[kSuper];
    for (int64_t b = 0; b < n / kSuper; ++b) {
        uint8_t* block = dst + 144 * b;
        quantize_q45_k_super(src + kSuper * b, 15, block, levels);
        uint8_t* qs = block + 16;
        for (int sub = 0; sub < 8; sub += 2)
            for (int l = 0; l < 32; ++l)
                qs[16 * sub + l] = static_cast<uint8_t>(levels[32 * sub + l] |
                                                        (levels[32 * sub + 32 + l] << 4));
    }
}

void quantize_q5_k(const float* src, uint8_t* dst, int64_t n) {
    int levels[kSuper];
    for (int64_t b = 0; b < n / kSuper; ++b) {
        uint8_t* block = dst + 176 * b;
        quantize_q45_k_super(src + kSuper * b, 31, block, levels);
        uint8_t* qh = block + 16;
        uint8_t* qs = block + 48;
        std::memset(qh, 0, 32);
        for (int sub = 0; sub < 8; ++sub) {
            for (int l = 0; l < 32; ++l) {
                const int level = levels[32 * sub + l];
                qh[l] |= static_cast<uint8_t>(((level >> 4) & 1) << sub);
                if (sub % 2 == 0)
                    qs[16 * sub + l] = static_cast<uint8_t>(level & 0x0f);
                else
                    qs[16 * (sub - 1) + l] |= static_cast<uint8_t>((level & 0x0f) << 4);
            }
        }
    }
}

void quantize_q6_k(const float* src, uint8_t* dst, int64_t n) {
    int levels[kSuper];
    for (int64_t b = 0; b < n / kSuper; ++b) {
        uint8_t* block = dst + 210 * b;
        uint8_t* ql = block;
        uint8_t* qh = block + 128;
        int8_t scale_codes[16];
        quantize_q6_k_super(src + kSuper * b, block + 208, scale_codes, levels);
        std::memcpy(block + 192, scale_codes, 16);
        std::memset(ql, 0, 128 + 64);
        for (int e = 0; e < kSuper; ++e) {
            const int u = levels[e] + 32;  // 0..63
            const int h = e / 128, g = (e / 32) % 4, l = e % 32;
            ql[64 * h + 32 * (g % 2) + l] |= static_cast<uint8_t>((u & 0x0f) << (4 * (g / 2)));
            qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * g));
        }
    }
}

// Q8_K quantization, ggml's reference rule: v = the first element of largest magnitude (sign
// kept); iscale = -127 / v; q = min(127, round_half_even(iscale * x)); d = 1 / iscale (f32);
// bsums[j] = sum of q over elements 16j..16j+15. An all-zero block is d = 0, q = 0.
void quantize_q8_k(const float* src, uint8_t* dst, int64_t n) {
    for (int64_t b = 0; b < n / kSuper; ++b) {
        const float* x = src + kSuper * b;
        uint8_t* block = dst + 292 * b;
        float amax = 0.0f, vmax = 0.0f;
        for (int e = 0; e < kSuper; ++e) {
            if (std::fabs(x[e]) > amax) {
                amax = std::fabs(x[e]);
                vmax = x[e];
            }
        }
        std::memset(block, 0, 292);
        if (amax == 0.0f) continue;
        const float iscale = -127.0f / vmax;
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) {
                const int q = round_even_clamped(iscale * x[16 * j + l], -128, 127);
                block[4 + 16 * j + l] = static_cast<uint8_t>(static_cast<int8_t>(q));
                sum += q;
            }
            store_u16(block + 260 + 2 * j, static_cast<uint16_t>(static_cast<int16_t>(sum)));
        }
        store_f32(block, 1.0f / iscale);
    }
}

}  // namespace dasllama::quants
