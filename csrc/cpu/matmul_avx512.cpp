// Matmul kernels for AVX-512 F/BW/VL/DQ + VNNI (built with DASLLAMA_ISA_FLAGS_avx512).
//
// One vpdpbusd multiplies 64 unsigned weight levels by 64 signed activation bytes and adds
// groups of four into 16 int32 lanes: with the packed interleave (kernels_matmul.h) lane i is
// block i of a 16-block group, so B/4 instructions give 16 exact block dot products. Levels
// are at most 255 and activations at most 127 in magnitude: a lane sums at most
// 32 * 255 * 128 < 2^21, no overflow. Per group and (row, token), the float work is one
// convert and one or two fused multiply-adds on 16 lanes.
//
// Tiles: decode (one token) runs 4 rows at a time so the activation loads are shared;
// prefill runs 2 rows x 4 tokens so each weight vector is unpacked once for 4 tokens.
#include <algorithm>
#include <cstring>

#include "cpu/kernels_matmul.h"
#include "cpu/simd_x86.h"  // <immintrin.h> with GCC 12's false warnings silenced

namespace dasllama::cpu::mm {
namespace {

// --- activation quantization ------------------------------------------------------------------

// Same arithmetic as quantize_act_generic (max is exact in any order; one multiply by the
// same reciprocal; the conversion rounds half to even), so the bytes are identical.
void quantize_act_avx512(PackKind kind, const float* x, int64_t cols, uint8_t* out) {
    const PackFormat& f = kFormats[kind];
    const int B = f.block;
    const int64_t nb = cols / B;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b0 = 0; b0 < nb;) {
        const GroupShape g = group_at(f, nb, b0);
        const int64_t gbytes = act_group_bytes(g);
        if (g.lanes() < kGroup) std::memset(out, 0, static_cast<size_t>(gbytes));
        alignas(64) float da[kGroup] = {}, dsa[kGroup] = {};
        alignas(64) int32_t sa[kGroup] = {};
        uint32_t* q = reinterpret_cast<uint32_t*>(out);
        const int words_per_lane = g.elems / 4;
        for (int i = 0; i < g.r; ++i) {
            const float* xb = x + (b0 + i) * B;
            const __m512 v0 = _mm512_loadu_ps(xb);
            const __m512 v1 = B == 32 ? _mm512_loadu_ps(xb + 16) : _mm512_setzero_ps();
            const float amax = _mm512_reduce_max_ps(
                _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
            const float d = amax / 127.0f;
            const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
            alignas(64) int32_t levels[32];
            _mm512_store_si512(levels, q0);
            _mm512_store_si512(levels + 16, q1);
            alignas(64) uint32_t packed[8];
            _mm_store_si128(reinterpret_cast<__m128i*>(packed), _mm512_cvtepi32_epi8(q0));
            _mm_store_si128(reinterpret_cast<__m128i*>(packed + 4), _mm512_cvtepi32_epi8(q1));
            for (int j = 0; j < g.lanes_per_block; ++j) {
                const int lane = i * g.lanes_per_block + j;
                int32_t sum = 0;
                for (int e = j * g.elems; e < (j + 1) * g.elems; ++e) sum += levels[e];
                for (int c = 0; c < words_per_lane; ++c)
                    q[c * kGroup + lane] = packed[j * words_per_lane + c];
                sa[lane] = sum;
                da[lane] = d;
                dsa[lane] = d * static_cast<float>(sum);
            }
        }
        uint8_t* tail = out + g.chunks * 64;
        std::memcpy(tail, da, 64);
        std::memcpy(tail + 64, sa, 64);
        std::memcpy(tail + 128, dsa, 64);
        out += gbytes;
        b0 += g.r;
    }
}

// --- the product -------------------------------------------------------------------------------

// One group of R rows x T tokens into acc. CH: chunks per lane (the group's shape decides).
// w: the group in row 0 (rows wrb bytes apart); act: the group in token 0 (tokens as apart).
template <int K, int R, int T, int CH>
inline void group_product(const uint8_t* w, int64_t wrb, const uint8_t* act, int64_t as,
                          const GroupShape& g, __m512 (&acc)[R][T]) {
    constexpr PackFormat f = kFormats[K];
    constexpr int per = f.nibbles ? 2 : 1;  // chunks per loaded vector
    const int L = g.lanes();
    const __mmask64 lanes = L == kGroup ? ~0ULL : (1ULL << (4 * L)) - 1;
    const int64_t stream = 4 * L;
    const int64_t lb = int64_t(CH) * stream / per;
    __m512i dot[R][T];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) dot[i][t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < CH / per; ++p) {
        __m512i wv[R][per];
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
            const uint8_t* wr = w + i * wrb;
            const __m512i bytes = _mm512_maskz_loadu_epi8(lanes, wr + p * stream);
            if constexpr (f.nibbles) {
                const __m512i low4 = _mm512_set1_epi8(0x0f);
                wv[i][0] = _mm512_and_si512(bytes, low4);
                wv[i][per - 1] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low4);
            } else {
                wv[i][0] = bytes;
            }
#pragma GCC unroll 2
            for (int k = 0; k < f.planes; ++k)
#pragma GCC unroll 2
                for (int h = 0; h < per; ++h) {
                    uint64_t bits;
                    std::memcpy(&bits, wr + lb + (k * CH + per * p + h) * 8, 8);
                    wv[i][h] = _mm512_mask_add_epi8(wv[i][h], _cvtu64_mask64(bits), wv[i][h],
                                                    _mm512_set1_epi8(static_cast<char>(16 << k)));
                }
        }
#pragma GCC unroll 2
        for (int h = 0; h < per; ++h)
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                const __m512i a = _mm512_load_si512(act + t * as + (per * p + h) * 64);
#pragma GCC unroll 4
                for (int i = 0; i < R; ++i)
                    dot[i][t] = _mm512_dpbusd_epi32(dot[i][t], wv[i][h], a);
            }
    }
    // Scales: one per block, spread over its lanes.
    const __mmask16 blocks = static_cast<__mmask16>((1u << g.r) - 1);
    const int64_t sofs = lb + int64_t(f.planes) * CH * 8;
    const int64_t mofs = sofs + int64_t(g.r) * (f.f32_scales ? 4 : 2);
    const int shift = g.lanes_per_block == 1 ? 0 : g.lanes_per_block == 2 ? 1 : 2;
    const __m512i spread = _mm512_srli_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), shift);
    auto load_scales = [&](const uint8_t* p) {
        __m512 v;
        if constexpr (f.f32_scales)
            v = _mm512_maskz_loadu_ps(blocks, p);
        else
            v = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(blocks, p));
        return shift ? _mm512_permutexvar_ps(spread, v) : v;
    };
    __m512 d[R], m[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
        d[i] = load_scales(w + i * wrb + sofs);
        if constexpr (f.has_min) m[i] = load_scales(w + i * wrb + mofs);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        const uint8_t* at = act + t * as + CH * 64;
        const __m512 da = _mm512_load_ps(reinterpret_cast<const float*>(at));
        __m512i sa_off = _mm512_setzero_si512();
        if constexpr (f.offset_log2 >= 0)
            sa_off = _mm512_slli_epi32(_mm512_load_si512(at + 64), f.offset_log2);
        __m512 dsa = _mm512_setzero_ps();
        if constexpr (f.has_min) dsa = _mm512_load_ps(reinterpret_cast<const float*>(at + 128));
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
            __m512i v = dot[i][t];
            if constexpr (f.offset_log2 >= 0) v = _mm512_sub_epi32(v, sa_off);
            acc[i][t] =
                _mm512_fmadd_ps(_mm512_mul_ps(d[i], da), _mm512_cvtepi32_ps(v), acc[i][t]);
            if constexpr (f.has_min) acc[i][t] = _mm512_fmadd_ps(m[i], dsa, acc[i][t]);
        }
    }
}

// R rows x T tokens of the product. w: row 0 of the tile; act: token 0 of the tile.
template <int K, int R, int T>
void tile(const uint8_t* w, int64_t wrb, int64_t nb, const uint8_t* act, int64_t as, float* y,
          int64_t ldy) {
    constexpr PackFormat f = kFormats[K];
    constexpr int kFullChunks = f.block / 4;
    __m512 acc[R][T];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[i][t] = _mm512_setzero_ps();
    const GroupShape full = group_at(f, kGroup, 0);
    const int64_t full_bytes = group_bytes(f, full), full_act = act_group_bytes(full);
    int64_t b0 = 0;
    for (; b0 + kGroup <= nb; b0 += kGroup, w += full_bytes, act += full_act)
        group_product<K, R, T, kFullChunks>(w, wrb, act, as, full, acc);
    if (b0 < nb) {  // the tail group: 8 (or 4) blocks of 2 (4) lanes, or a partial 16
        const GroupShape g = group_at(f, nb, b0);
        if (g.chunks == kFullChunks)
            group_product<K, R, T, kFullChunks>(w, wrb, act, as, g, acc);
        else if (g.chunks == kFullChunks / 2)
            group_product<K, R, T, kFullChunks / 2>(w, wrb, act, as, g, acc);
        else if constexpr (kFullChunks / 4 >= 2)
            group_product<K, R, T, kFullChunks / 4>(w, wrb, act, as, g, acc);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) y[t * ldy + i] = _mm512_reduce_add_ps(acc[i][t]);
}

// Decode streams each weight row once, at memory speed only when the loads are requested well
// ahead: without software prefetch one thread reached under half its read bandwidth (the
// hardware prefetcher alone keeps too few misses in flight). A few KiB ahead is enough.
constexpr int64_t kPrefetchAhead = 4096;

void prefetch(const uint8_t* begin, const uint8_t* end) {
    for (const uint8_t* p = begin; p < end; p += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// R rows of the weight against every token: 4-token tiles, then single tokens.
template <int K, int R>
void row_tiles(const uint8_t* wr, int64_t wrb, int64_t nb, const uint8_t* act, int64_t as,
               int64_t n_tokens, float* yr, int64_t ldy) {
    int64_t t = 0;
    for (; t + 4 <= n_tokens; t += 4) tile<K, R, 4>(wr, wrb, nb, act + t * as, as, yr + t * ldy, ldy);
    for (; t < n_tokens; ++t) tile<K, R, 1>(wr, wrb, nb, act + t * as, as, yr + t * ldy, ldy);
}

template <int K>
void gemm_kind(const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols, const uint8_t* act,
               int64_t as, int64_t n_tokens, float* y, int64_t ldy) {
    const int64_t nb = cols / kFormats[K].block;
    int64_t r = 0;
    if (n_tokens == 1) {
        const uint8_t* end = w + n_rows * wrb;
        prefetch(w, std::min(w + kPrefetchAhead, end));
        for (; r + 4 <= n_rows; r += 4) {
            const uint8_t* next = w + r * wrb + kPrefetchAhead;
            prefetch(next, std::min(next + 4 * wrb, end));
            tile<K, 4, 1>(w + r * wrb, wrb, nb, act, as, y + r, ldy);
        }
        for (; r < n_rows; ++r) tile<K, 1, 1>(w + r * wrb, wrb, nb, act, as, y + r, ldy);
        return;
    }
    for (; r + 2 <= n_rows; r += 2) row_tiles<K, 2>(w + r * wrb, wrb, nb, act, as, n_tokens, y + r, ldy);
    for (; r < n_rows; ++r) row_tiles<K, 1>(w + r * wrb, wrb, nb, act, as, n_tokens, y + r, ldy);
}

void gemm_avx512(PackKind kind, const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols,
                 const uint8_t* act, int64_t as, int64_t n_tokens, float* y, int64_t ldy) {
    with_pack_kind(kind, [&](auto k) {
        gemm_kind<decltype(k)::value>(w, wrb, n_rows, cols, act, as, n_tokens, y, ldy);
    });
}

const Kernels table{"avx512",        quantize_act_avx512,  gemm_avx512,
                    gemm_f32_avx512, gemm_q8_0_f32_avx512, dequantize_q8_0_avx512,
                    dequantize_f16_avx512};

}  // namespace

const Kernels* kernels_avx512() { return &table; }

}  // namespace dasllama::cpu::mm
