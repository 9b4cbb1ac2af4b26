// Matmul kernels for AVX2 + FMA + F16C (built with DASLLAMA_ISA_FLAGS_avx2).
//
// The packed layout's 16 lanes are two 256-bit halves. Without VNNI the u8 x s8 products go
// through vpmaddubsw (pairs summed into saturating int16) and vpmaddwd (into int32 lanes).
// No pair saturates: levels up to 63 give at most 63 * 127 * 2 = 16002. Q8_0 levels reach
// 255, so its signed weights are restored (u ^ 0x80) and multiplied as |w| * sign(a, w):
// at most 128 * 127 * 2 = 32512, and the dot is then already the signed one (no offset).
// Activations are quantized by the generic kernel (a small share of the work).

#include <algorithm>
#include <cstring>

#include "cpu/kernels_matmul.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::mm {
namespace {

// Lanes [8h, 8h + 8) of a 64-byte chunk vector, lanes >= L not read (zero).
inline __m256i load_half(const uint8_t* p, int L, int h) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(L - 8 * h), idx);
    return _mm256_maskload_epi32(reinterpret_cast<const int*>(p + 32 * h), mask);
}

// Bytes whose bit in `bits` (32 bits, one per byte) is set become `value`, others 0.
inline __m256i bits_to_bytes(uint32_t bits, int value) {
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                         3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i select = _mm256_set1_epi64x(0x8040201008040201LL);
    const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
    return _mm256_and_si256(on, _mm256_set1_epi8(static_cast<char>(value)));
}

float scale_at(bool f32, const uint8_t* p) {
    if (f32) {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

template <int K, int R, int T, int CH>
inline void group_product(const uint8_t* w, int64_t wrb, const uint8_t* act, int64_t as,
                          const GroupShape& g, __m256 (&acc)[R][T][2]) {
    constexpr PackFormat f = kFormats[K];
    constexpr bool kSignedQ8 = !f.nibbles;
    constexpr int per = f.nibbles ? 2 : 1;
    const int L = g.lanes();
    const int halves = L > 8 ? 2 : 1;
    const int64_t stream = 4 * L;
    const int64_t lb = int64_t(CH) * stream / per;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int hv = 0; hv < halves; ++hv) {
        __m256i dot[R][T];
        for (int i = 0; i < R; ++i)
            for (int t = 0; t < T; ++t) dot[i][t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int p = 0; p < CH / per; ++p) {
            __m256i wv[R][per];
            for (int i = 0; i < R; ++i) {
                const uint8_t* wr = w + i * wrb;
                const __m256i bytes = load_half(wr + p * stream, L, hv);
                if constexpr (f.nibbles) {
                    const __m256i low4 = _mm256_set1_epi8(0x0f);
                    wv[i][0] = _mm256_and_si256(bytes, low4);
                    wv[i][per - 1] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
                } else {
                    wv[i][0] = _mm256_xor_si256(bytes, _mm256_set1_epi8(static_cast<char>(0x80)));
                }
                for (int k = 0; k < f.planes; ++k)
                    for (int h = 0; h < per; ++h) {
                        uint64_t bits;
                        std::memcpy(&bits, wr + lb + (k * CH + per * p + h) * 8, 8);
                        wv[i][h] = _mm256_add_epi8(
                            wv[i][h], bits_to_bytes(static_cast<uint32_t>(bits >> (32 * hv)),
                                                    16 << k));
                    }
            }
            for (int h = 0; h < per; ++h)
                for (int t = 0; t < T; ++t) {
                    const __m256i a = _mm256_load_si256(
                        reinterpret_cast<const __m256i*>(act + t * as + (per * p + h) * 64 + 32 * hv));
                    for (int i = 0; i < R; ++i) {
                        __m256i prod;
                        if constexpr (kSignedQ8)
                            prod = _mm256_maddubs_epi16(_mm256_abs_epi8(wv[i][h]),
                                                        _mm256_sign_epi8(a, wv[i][h]));
                        else
                            prod = _mm256_maddubs_epi16(wv[i][h], a);
                        dot[i][t] = _mm256_add_epi32(dot[i][t], _mm256_madd_epi16(prod, ones));
                    }
                }
        }
        // Per-lane scales (and mins) of this half.
        const int64_t sofs = lb + int64_t(f.planes) * CH * 8;
        const int ss = f.f32_scales ? 4 : 2;
        for (int i = 0; i < R; ++i) {
            alignas(32) float d[8] = {}, m[8] = {};
            for (int l = 0; l < 8 && 8 * hv + l < L; ++l) {
                const int b = (8 * hv + l) / g.lanes_per_block;
                d[l] = scale_at(f.f32_scales, w + i * wrb + sofs + b * ss);
                if (f.has_min) m[l] = scale_at(f.f32_scales, w + i * wrb + sofs + (g.r + b) * ss);
            }
            const __m256 dv = _mm256_load_ps(d), mv = _mm256_load_ps(m);
            for (int t = 0; t < T; ++t) {
                const uint8_t* at = act + t * as + CH * 64 + 32 * hv;
                const __m256 da = _mm256_load_ps(reinterpret_cast<const float*>(at));
                __m256i v = dot[i][t];
                if constexpr (f.offset_log2 >= 0 && !kSignedQ8)
                    v = _mm256_sub_epi32(v, _mm256_slli_epi32(_mm256_load_si256(
                        reinterpret_cast<const __m256i*>(at + 64)), f.offset_log2));
                acc[i][t][hv] = _mm256_fmadd_ps(_mm256_mul_ps(dv, da), _mm256_cvtepi32_ps(v),
                                                acc[i][t][hv]);
                if constexpr (f.has_min)
                    acc[i][t][hv] = _mm256_fmadd_ps(
                        mv, _mm256_load_ps(reinterpret_cast<const float*>(at + 128)),
                        acc[i][t][hv]);
            }
        }
    }
}

template <int K, int R, int T>
void tile(const uint8_t* w, int64_t wrb, int64_t nb, const uint8_t* act, int64_t as, float* y,
          int64_t ldy) {
    constexpr PackFormat f = kFormats[K];
    constexpr int kFullChunks = f.block / 4;
    __m256 acc[R][T][2];
    for (int i = 0; i < R; ++i)
        for (int t = 0; t < T; ++t) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
    const GroupShape full = group_at(f, kGroup, 0);
    const int64_t full_bytes = group_bytes(f, full), full_act = act_group_bytes(full);
    int64_t b0 = 0;
    for (; b0 + kGroup <= nb; b0 += kGroup, w += full_bytes, act += full_act)
        group_product<K, R, T, kFullChunks>(w, wrb, act, as, full, acc);
    if (b0 < nb) {
        const GroupShape g = group_at(f, nb, b0);
        if (g.chunks == kFullChunks)
            group_product<K, R, T, kFullChunks>(w, wrb, act, as, g, acc);
        else if (g.chunks == kFullChunks / 2)
            group_product<K, R, T, kFullChunks / 2>(w, wrb, act, as, g, acc);
        else if constexpr (kFullChunks / 4 >= 2)
            group_product<K, R, T, kFullChunks / 4>(w, wrb, act, as, g, acc);
    }
    for (int i = 0; i < R; ++i)
        for (int t = 0; t < T; ++t)
            y[t * ldy + i] = simd_x86::hsum(_mm256_add_ps(acc[i][t][0], acc[i][t][1]));
}

// Decode streams each weight row once; the loads must be requested a few KiB ahead to keep
// enough misses in flight (see matmul_avx512.cpp).
constexpr int64_t kPrefetchAhead = 4096;

void prefetch(const uint8_t* begin, const uint8_t* end) {
    for (const uint8_t* p = begin; p < end; p += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

template <int K>
void gemm_kind(const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols, const uint8_t* act,
               int64_t as, int64_t n_tokens, float* y, int64_t ldy) {
    const int64_t nb = cols / kFormats[K].block;
    const uint8_t* end = w + n_rows * wrb;
    if (n_tokens == 1) prefetch(w, std::min(w + kPrefetchAhead, end));
    for (int64_t r = 0; r < n_rows; ++r) {
        if (n_tokens == 1) {
            const uint8_t* next = w + r * wrb + kPrefetchAhead;
            prefetch(next, std::min(next + wrb, end));
        }
        int64_t t = 0;
        for (; t + 4 <= n_tokens; t += 4)
            tile<K, 1, 4>(w + r * wrb, wrb, nb, act + t * as, as, y + t * ldy + r, ldy);
        for (; t < n_tokens; ++t)
            tile<K, 1, 1>(w + r * wrb, wrb, nb, act + t * as, as, y + t * ldy + r, ldy);
    }
}

void gemm_avx2(PackKind kind, const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols,
               const uint8_t* act, int64_t as, int64_t n_tokens, float* y, int64_t ldy) {
    with_pack_kind(kind, [&](auto k) {
        gemm_kind<decltype(k)::value>(w, wrb, n_rows, cols, act, as, n_tokens, y, ldy);
    });
}

const Kernels table{"avx2",        quantize_act_generic, gemm_avx2,
                    gemm_f32_avx2, gemm_q8_0_f32_avx2,   dequantize_q8_0_avx2,
                    dequantize_f16_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &table; }

}  // namespace dasllama::cpu::mm
