// attend_self's bfloat16 path on AMX (built with DASLLAMA_ISA_FLAGS_amx): the two products of
// a query block on the tile unit, operands rounded to bfloat16, sums in float32.
//
// Tiles are all 16 rows x 64 bytes (palette 1). scores: C (16 queries x 16 keys, float32) +=
// A (16 queries x 32 dimensions, bf16) . B (32 dimensions x 16 keys, bf16 pairs), four key
// tiles at once in tmm0-3, the block's queries in tmm4/tmm5, keys streamed through tmm6/tmm7.
// weighted sum: C (16 queries x 16 value dimensions) += A (16 queries x 32 keys of
// probabilities) . B (32 keys x 16 dimensions), the head's 64 dimensions in tmm0-3.
// B operands hold pairs along the summed dimension ([k/2][n][2]): pack_keys and pack_values
// lay a head out that way once per call.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/amx_x86.h"
#include "nn/attention_self.h"

// GCC 12 reports the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics as
// "may be used uninitialized" in this file's inlined vector code (a known false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dasllama::nn::self_attn {

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512F__)
namespace {

using cpu::amx_x86::kTileElems;
using cpu::amx_x86::load_config;
using cpu::amx_x86::to_bf16;
using cpu::amx_x86::to_bf16x16;

// exp(x) for x in [-87.3, 88.3] (clamped there): simd_x86.h's exp_avx2 on 16 lanes (x = n ln2
// + r, Cephes' degree-6 polynomial for exp(r), 2^n in the exponent bits; about 1 ulp).
inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    const __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// p[0..n_kt) = bf16(softmax(s[0..n))), zero past n. s (n_kt floats) is overwritten with the
// exponentials. The sum runs in float32 over 16 lanes: the probabilities are rounded to
// bfloat16 (8 bits) afterwards anyway.
void softmax_to_bf16(float* s, int64_t n, int64_t n_kt, uint16_t* p) {
    __m512 vmax = _mm512_set1_ps(-3.4e38f);   // a row of -inf: tiny equal weights
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    if (tail) vmax = _mm512_mask_max_ps(vmax, tail, vmax, _mm512_maskz_loadu_ps(tail, s + j));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
    __m512 sum = _mm512_setzero_ps();
    for (j = 0; j + 16 <= n; j += 16) {
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), m));
        _mm512_storeu_ps(s + j, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (tail) {
        const __m512 x = _mm512_maskz_loadu_ps(tail, s + j);
        const __m512 e = _mm512_maskz_mov_ps(tail, exp512(_mm512_sub_ps(x, m)));
        _mm512_mask_storeu_ps(s + j, tail, e);
        sum = _mm512_add_ps(sum, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (j = 0; j + 16 <= n; j += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + j),
                            to_bf16x16(_mm512_mul_ps(_mm512_loadu_ps(s + j), inv)));
    if (tail)
        _mm256_mask_storeu_epi16(
            p + j, tail, to_bf16x16(_mm512_mul_ps(_mm512_maskz_loadu_ps(tail, s + j), inv)));
    std::fill(p + n, p + n_kt, uint16_t(0));   // padding keys take no weight
}

void pack_keys_amx(const float* k, int64_t ld, int64_t n, int64_t hd, int64_t n_kt,
                   uint16_t* out) {
    const int64_t n_cc = hd / 32;
    for (int64_t jt = 0; jt < n_kt / 16; ++jt)
        for (int64_t cc = 0; cc < n_cc; ++cc) {
            uint16_t* tile = out + (jt * n_cc + cc) * kTileElems;
            for (int64_t r = 0; r < 16; ++r)
                for (int64_t nn = 0; nn < 16; ++nn) {
                    const int64_t j = jt * 16 + nn;
                    for (int64_t e = 0; e < 2; ++e)
                        tile[r * 32 + 2 * nn + e] =
                            j < n ? to_bf16(k[j * ld + cc * 32 + 2 * r + e]) : uint16_t(0);
                }
        }
}

void pack_values_amx(const float* v, int64_t ld, int64_t n, int64_t hd, int64_t n_kt,
                     uint16_t* out) {
    const int64_t n_ct = hd / 16;
    for (int64_t jc = 0; jc < n_kt / 32; ++jc)
        for (int64_t ct = 0; ct < n_ct; ++ct) {
            uint16_t* tile = out + (jc * n_ct + ct) * kTileElems;
            for (int64_t r = 0; r < 16; ++r)
                for (int64_t e = 0; e < 2; ++e) {
                    const int64_t j = jc * 32 + 2 * r + e;
                    for (int64_t nn = 0; nn < 16; ++nn)
                        tile[r * 32 + 2 * nn + e] =
                            j < n ? to_bf16(v[j * ld + ct * 16 + nn]) : uint16_t(0);
                }
        }
}

// Scores of 16 queries (qb: 16 x 64 bf16, rows 128 bytes apart) against every key.
void scores_tiles(const uint16_t* qb, const uint16_t* kp, int64_t n_kt, float* s) {
    _tile_loadd(4, qb, 128);
    _tile_loadd(5, qb + 32, 128);
    const int64_t ld_s = n_kt * 4;
    for (int64_t j = 0; j < n_kt; j += 64) {
        const uint16_t* b = kp + (j / 16) * 2 * kTileElems;   // 4 key tiles x 2 chunks
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(6, b + 0 * kTileElems, 64);
        _tile_loadd(7, b + 1 * kTileElems, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(0, 5, 7);
        _tile_loadd(6, b + 2 * kTileElems, 64);
        _tile_loadd(7, b + 3 * kTileElems, 64);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(1, 5, 7);
        _tile_loadd(6, b + 4 * kTileElems, 64);
        _tile_loadd(7, b + 5 * kTileElems, 64);
        _tile_dpbf16ps(2, 4, 6);
        _tile_dpbf16ps(2, 5, 7);
        _tile_loadd(6, b + 6 * kTileElems, 64);
        _tile_loadd(7, b + 7 * kTileElems, 64);
        _tile_dpbf16ps(3, 4, 6);
        _tile_dpbf16ps(3, 5, 7);
        _tile_stored(0, s + j, ld_s);
        _tile_stored(1, s + j + 16, ld_s);
        _tile_stored(2, s + j + 32, ld_s);
        _tile_stored(3, s + j + 48, ld_s);
    }
}

// out (16 x 64 float32, rows 256 bytes apart) = P (16 x n_kt bf16) . V.
void weighted_sum_tiles(const uint16_t* pb, int64_t n_kt, const uint16_t* vp, float* out) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const int64_t ld_p = n_kt * 2;
    for (int64_t jc = 0; jc < n_kt / 32; ++jc) {
        const uint16_t* b = vp + jc * 4 * kTileElems;
        _tile_loadd(4, pb + jc * 32, ld_p);
        _tile_loadd(5, b + 0 * kTileElems, 64);
        _tile_loadd(6, b + 1 * kTileElems, 64);
        _tile_loadd(7, b + 2 * kTileElems, 64);
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_loadd(5, b + 3 * kTileElems, 64);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 4, 5);
    }
    _tile_stored(0, out, 256);
    _tile_stored(1, out + 16, 256);
    _tile_stored(2, out + 32, 256);
    _tile_stored(3, out + 48, 256);
}

void block_amx(const float* q, int64_t ld_q, int64_t nq, float scale, const uint16_t* kp,
               const uint16_t* vp, int64_t n, int64_t n_kt, Bf16Block& buf, float* out,
               int64_t ld_out) {
    constexpr int64_t hd = kBf16HeadDim;
    const int64_t rows = (nq + 15) / 16 * 16;
    buf.q.assign(size_t(rows * hd), 0);
    buf.s.resize(size_t(rows * n_kt));
    buf.p.resize(size_t(rows * n_kt));
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < nq; ++i)
        for (int64_t c = 0; c < hd; c += 16)
            _mm256_storeu_si256(
                reinterpret_cast<__m256i*>(buf.q.data() + i * hd + c),
                to_bf16x16(_mm512_mul_ps(_mm512_loadu_ps(q + i * ld_q + c), vscale)));
    load_config();
    for (int64_t i = 0; i < rows; i += 16)
        scores_tiles(buf.q.data() + i * hd, kp, n_kt, buf.s.data() + i * n_kt);
    for (int64_t i = 0; i < rows; ++i) {
        uint16_t* p = buf.p.data() + i * n_kt;
        if (i >= nq) {   // padding rows of the last tile: weights 0, outputs not kept
            std::fill(p, p + n_kt, uint16_t(0));
            continue;
        }
        softmax_to_bf16(buf.s.data() + i * n_kt, n, n_kt, p);
    }
    alignas(64) float tile_out[16 * hd];
    for (int64_t i = 0; i < rows; i += 16) {
        weighted_sum_tiles(buf.p.data() + i * n_kt, n_kt, vp, tile_out);
        for (int64_t r = 0; r < 16 && i + r < nq; ++r)
            std::copy(tile_out + r * hd, tile_out + (r + 1) * hd, out + (i + r) * ld_out);
    }
    _tile_release();
}

const Bf16Kernels amx{"amx", pack_keys_amx, pack_values_amx, block_amx};

}  // namespace

const Bf16Kernels* bf16_kernels_amx() { return &amx; }
#else
const Bf16Kernels* bf16_kernels_amx() { return nullptr; }
#endif

}  // namespace dasllama::nn::self_attn
