// The u8 x s8 -> i32 product of int8_ops.h with AVX-512 VNNI. Weights are packed 16 rows at a
// time as groups of [16 rows x 4 bytes] (one 512-bit vector per 4 values of k), so vpdpbusd
// multiplies 4 activation bytes, broadcast, by 4 bytes of 16 rows and adds each group of four
// products into that row's 32-bit lane: no horizontal sums. vpdpbusd does not saturate
// (vpdpbusds would), so the sums are exact. A step covers 4 activation rows x 32 weight rows
// (8 accumulators), or 8 x 32 (16) where the rows allow.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "tts/kokoro/int8_ops.h"

namespace dasllama::kokoro {

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
namespace {

constexpr int64_t kBlock = 16;   // weight rows per packed block (one 512-bit lane each)

void pack_vnni(const int8_t* rows, int64_t n, int64_t kp, int8_t* out) {
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    std::memset(out, 0, size_t(blocks * kBlock * kp));
    for (int64_t r = 0; r < n; ++r) {
        int8_t* blk = out + (r / kBlock) * kBlock * kp;
        const int64_t lane = r % kBlock;
        for (int64_t k = 0; k < kp; ++k)
            blk[(k / 4) * (kBlock * 4) + lane * 4 + (k % 4)] = rows[r * kp + k];
    }
}

template <int MR, int NB>
void tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c, int64_t ldc,
          int64_t n_last) {   // n_last: columns written of the last block (1..16)
    __m512i acc[MR][NB];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_si512();
    const int64_t stride = kBlock * kp;   // bytes between blocks
    for (int64_t g = 0; g < kp / 4; ++g) {
        __m512i w[NB];
        for (int j = 0; j < NB; ++j) w[j] = _mm512_loadu_si512(b + j * stride + g * 64);
        for (int i = 0; i < MR; ++i) {
            int32_t four;
            std::memcpy(&four, a + i * lda + 4 * g, 4);
            const __m512i x = _mm512_set1_epi32(four);
            for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], x, w[j]);
        }
    }
    const __mmask16 last = static_cast<__mmask16>((1u << n_last) - 1u);
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NB; ++j) {
            int32_t* dst = c + i * ldc + j * kBlock;
            if (j == NB - 1)
                _mm512_mask_storeu_epi32(dst, last, acc[i][j]);
            else
                _mm512_storeu_si512(dst, acc[i][j]);
        }
}

template <int MR>
void rows_tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t kp, int32_t* c,
               int64_t ldc, int64_t n) {
    int64_t j = 0;
    for (; j + 2 * kBlock <= n; j += 2 * kBlock)
        tile<MR, 2>(a, lda, b + j * kp, kp, c + j, ldc, kBlock);
    const int64_t left = n - j;
    if (left > kBlock)
        tile<MR, 2>(a, lda, b + j * kp, kp, c + j, ldc, left - kBlock);
    else if (left > 0)
        tile<MR, 1>(a, lda, b + j * kp, kp, c + j, ldc, left);
}

void gemm_avx512(const uint8_t* a, int64_t lda, const int8_t* b, int64_t m, int64_t n,
                 int64_t kp, int32_t* c, int64_t ldc) {
    int64_t i = 0;
    for (; i + 8 <= m; i += 8) rows_tile<8>(a + i * lda, lda, b, kp, c + i * ldc, ldc, n);
    if (i + 4 <= m) {
        rows_tile<4>(a + i * lda, lda, b, kp, c + i * ldc, ldc, n);
        i += 4;
    }
    switch (m - i) {
        case 3: rows_tile<3>(a + i * lda, lda, b, kp, c + i * ldc, ldc, n); break;
        case 2: rows_tile<2>(a + i * lda, lda, b, kp, c + i * ldc, ldc, n); break;
        case 1: rows_tile<1>(a + i * lda, lda, b, kp, c + i * ldc, ldc, n); break;
        default: break;
    }
}

const Int8Kernels kAvx512{"avx512", kBlock, pack_vnni, gemm_avx512, nullptr};

// ---- the element-wise passes (Int8Vector): 16 values at a time, the generic level's
// operations on each (no product is followed by an add that the compiler could fuse with it
// but x * 0, whose sum is 0 or NaN either way).
constexpr float kRoundMagic = 12582912.0f;   // 1.5 * 2^23: the add rounds half to even

void range_avx512(const float* x, int64_t n, float& lo, float& hi, float& zero) {
    __m512 l = _mm512_setzero_ps(), h = _mm512_setzero_ps(), z = _mm512_setzero_ps();
    const __m512 zeros = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        l = _mm512_min_ps(l, v);
        h = _mm512_max_ps(h, v);
        z = _mm512_add_ps(z, _mm512_mul_ps(v, zeros));
    }
    if (i < n) {   // masked lanes read as 0, inside the range already
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        l = _mm512_min_ps(l, v);
        h = _mm512_max_ps(h, v);
        z = _mm512_add_ps(z, _mm512_mul_ps(v, zeros));
    }
    lo = _mm512_reduce_min_ps(l);
    hi = _mm512_reduce_max_ps(h);
    zero = _mm512_reduce_add_ps(z);
}

inline __m512i quantize16(__m512 x, __m512 scale, __m512 zp) {
    const __m512 magic = _mm512_set1_ps(kRoundMagic);
    __m512 v = _mm512_div_ps(x, scale);
    v = _mm512_sub_ps(_mm512_add_ps(v, magic), magic);
    v = _mm512_add_ps(v, zp);
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_setzero_ps()), _mm512_set1_ps(float(kQuantMax)));
    return _mm512_cvttps_epi32(v);
}

void quantize_avx512(const float* x, int64_t n, float scale, float zp, uint8_t* q) {
    const __m512 sc = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                         _mm512_cvtepi32_epi8(quantize16(_mm512_loadu_ps(x + i), sc, z)));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
        _mm512_mask_cvtepi32_storeu_epi8(q + i, m,
                                         quantize16(_mm512_maskz_loadu_ps(m, x + i), sc, z));
    }
}

// r[i] (row i of a 16 x 16 block) becomes column i: three rounds of shuffles (pairs within
// 128-bit lanes, quads within lanes, then the lanes).
inline void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int k = 0; k < 8; ++k) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; ++k) {   // r[4k + c]: rows 4k..4k+3 at column 4 * lane + c
        r[4 * k] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
        r[4 * k + 1] = _mm512_shuffle_ps(t[4 * k], t[4 * k + 2], 0xEE);
        r[4 * k + 2] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
        r[4 * k + 3] = _mm512_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xEE);
    }
    __m512 u[16];
    for (int c = 0; c < 4; ++c) {
        const __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
        const __m512 u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        const __m512 u2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
        const __m512 u3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
        u[c] = _mm512_shuffle_f32x4(u0, u2, 0x88);
        u[8 + c] = _mm512_shuffle_f32x4(u0, u2, 0xDD);
        u[4 + c] = _mm512_shuffle_f32x4(u1, u3, 0x88);
        u[12 + c] = _mm512_shuffle_f32x4(u1, u3, 0xDD);
    }
    for (int i = 0; i < 16; ++i) r[i] = u[i];
}

inline float rescale1(int32_t a, int32_t col, uint32_t zq, double fb, float s) {
    const uint32_t u = uint32_t(a) + uint32_t(col) - zq;
    return static_cast<float>(static_cast<double>(static_cast<int32_t>(u)) + fb) * s;
}

void rescale_avx512(const int32_t* acc, int64_t m, int64_t n, const int32_t* col, int32_t zw,
                    const int64_t* qsum, const double* fb, float s, float* out, int64_t ldo) {
    const __m512 sv = _mm512_set1_ps(s);
    const int64_t m16 = m / 16 * 16, n16 = n / 16 * 16;
    for (int64_t i0 = 0; i0 < m16; i0 += 16)
        for (int64_t j0 = 0; j0 < n16; j0 += 16) {
            const __m512i c = _mm512_loadu_si512(col + j0);
            const __m512d f0 = _mm512_loadu_pd(fb + j0), f1 = _mm512_loadu_pd(fb + j0 + 8);
            __m512 r[16];
            for (int ii = 0; ii < 16; ++ii) {
                const int64_t i = i0 + ii;
                const uint32_t zq = uint32_t(zw) * uint32_t(int32_t(qsum[i]));
                const __m512i u = _mm512_sub_epi32(
                    _mm512_add_epi32(_mm512_loadu_si512(acc + i * n + j0), c),
                    _mm512_set1_epi32(int32_t(zq)));
                const __m512d d0 = _mm512_add_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(u)), f0);
                const __m512d d1 =
                    _mm512_add_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(u, 1)), f1);
                const __m512 f = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(d0)),
                                                    _mm512_cvtpd_ps(d1), 1);
                r[ii] = _mm512_mul_ps(f, sv);
            }
            transpose16(r);
            for (int jj = 0; jj < 16; ++jj) _mm512_storeu_ps(out + (j0 + jj) * ldo + i0, r[jj]);
        }
    for (int64_t i = 0; i < m; ++i) {   // the rows and columns past the 16 x 16 blocks
        const uint32_t zq = uint32_t(zw) * uint32_t(int32_t(qsum[i]));
        for (int64_t j = i < m16 ? n16 : 0; j < n; ++j)
            out[j * ldo + i] = rescale1(acc[i * n + j], col[j], zq, fb[j], s);
    }
}

// 16 channels x 16 positions at a time: each channel's 16 values quantized as quantize_avx512
// does (int32 lanes), summed across the channels into the positions' sums, then transposed so
// that each position's 16 channel bytes are one store into its time-major row. Channel blocks
// outside (16 rows read front to back), the thread's positions inside; a last partial block
// of channels takes one lane per channel.
void quantize_time_major_avx512(const float* x, int64_t c, int64_t ld, int64_t t0, int64_t t1,
                                float scale, float zp, uint8_t* q, int64_t* sums) {
    const __m512 sc = _mm512_set1_ps(scale), z = _mm512_set1_ps(zp);
    const int64_t n = t1 - t0;
    std::fill(sums, sums + n, int64_t(0));
    const int64_t c16 = c / 16 * 16;
    for (int64_t ci0 = 0; ci0 < c16; ci0 += 16) {
        const float* xb = x + ci0 * ld + t0;
        for (int64_t t = 0; t < n; t += 16) {
            const int64_t left = n - t, nt = left >= 16 ? 16 : left;
            const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
            __m512 r[16];
            __m512i s = _mm512_setzero_si512();
            for (int ii = 0; ii < 16; ++ii) {
                const __m512i v = quantize16(_mm512_maskz_loadu_ps(m, xb + ii * ld + t), sc, z);
                s = _mm512_add_epi32(s, v);
                r[ii] = _mm512_castsi512_ps(v);
            }
            transpose16(r);
            for (int64_t tt = 0; tt < nt; ++tt)
                _mm_storeu_si128(reinterpret_cast<__m128i*>(q + (t + tt) * c + ci0),
                                 _mm512_cvtepi32_epi8(_mm512_castps_si512(r[tt])));
            alignas(64) int32_t part[16];
            _mm512_store_si512(part, s);
            for (int64_t tt = 0; tt < nt; ++tt) sums[t + tt] += part[tt];
        }
    }
    for (int64_t ci = c16; ci < c; ++ci) {
        const float* xr = x + ci * ld + t0;
        for (int64_t t = 0; t < n; t += 16) {
            const int64_t left = n - t, nt = left >= 16 ? 16 : left;
            const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
            alignas(64) int32_t v[16];
            _mm512_store_si512(v, quantize16(_mm512_maskz_loadu_ps(m, xr + t), sc, z));
            for (int64_t tt = 0; tt < nt; ++tt) {
                q[(t + tt) * c + ci] = static_cast<uint8_t>(v[tt]);
                sums[t + tt] += v[tt];
            }
        }
    }
}

const Int8Vector kVectorAvx512{"avx512", range_avx512, quantize_avx512, rescale_avx512,
                               quantize_time_major_avx512};

}  // namespace
#endif

const Int8Vector* int8_vector_avx512() {
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
    return &kVectorAvx512;
#else
    return nullptr;
#endif
}

const Int8Kernels* int8_kernels_avx512() {
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
    return &kAvx512;
#else
    return nullptr;
#endif
}

}  // namespace dasllama::kokoro
