// linear_s8's kernels on AVX-512 with VNNI (built with DASLLAMA_ISA_FLAGS_avx512): the
// activation rule 16 values at a time, and the u8 x s8 product (vpdpbusd) of up to 6 token
// rows against two packed blocks of 16 weight rows, dequantized in registers.
#include <immintrin.h>

#include <algorithm>

#include "nn/linear_s8.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dasllama::nn::s8_kernels {

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
namespace {

constexpr int64_t kBlock = 16;
constexpr int kMaxTokens = 6;   // token rows per micro-tile: 12 accumulators of 32 lanes

__mmask16 mask_of(int64_t n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

void quantize_rows(const float* x, int64_t t0, int64_t t1, int64_t cols, int64_t cols_pad,
                   uint8_t* u, float* inv) {
    const __m512 sign = _mm512_set1_ps(-0.f), shift = _mm512_set1_ps(128.f);
    for (int64_t t = t0; t < t1; ++t) {
        const float* r = x + t * cols;
        __m512 m = _mm512_setzero_ps();
        for (int64_t k = 0; k < cols; k += 16) {
            const __m512 v = _mm512_maskz_loadu_ps(mask_of(cols - k), r + k);
            m = _mm512_max_ps(m, _mm512_andnot_ps(sign, v));
        }
        const float amax = _mm512_reduce_max_ps(m);
        const float s = amax != 0.f ? 127.f / amax : 1.f;
        inv[t] = 1.f / s;
        const __m512 vs = _mm512_set1_ps(s);
        uint8_t* o = u + t * cols_pad;
        for (int64_t k = 0; k < cols_pad; k += 16) {
            const __mmask16 live = mask_of(cols - k);
            const __m512 v = _mm512_maskz_loadu_ps(live, r + k);
            // one rounding for x * s + 128 (fused), then round half to even
            const __m512 f = _mm512_roundscale_ps(_mm512_fmadd_ps(v, vs, shift),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m128i b = _mm512_cvtusepi32_epi8(_mm512_cvttps_epu32(f));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(o + k),
                             _mm_maskz_mov_epi8(live, b));
        }
    }
}

template <int MR>
void micro(const uint8_t* u, int64_t ldu, const float* inv, const int8_t* blk0, int64_t n_k4,
           const S8Matrix& w, int64_t n0, const float* bias, float* y, int64_t ldy) {
    __m512i acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    const int8_t* blk1 = blk0 + n_k4 * 64;
    for (int64_t g = 0; g < n_k4; ++g) {
        const __m512i w0 = _mm512_loadu_si512(blk0 + g * 64);
        const __m512i w1 = _mm512_loadu_si512(blk1 + g * 64);
        for (int r = 0; r < MR; ++r) {
            int32_t a4;
            __builtin_memcpy(&a4, u + r * ldu + g * 4, 4);
            const __m512i a = _mm512_set1_epi32(a4);
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, w0);
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, w1);
        }
    }
    for (int j = 0; j < 2; ++j) {
        const int64_t n = n0 + j * kBlock;
        if (n >= w.rows) break;
        const __mmask16 live = mask_of(w.rows - n);
        const __m512i comp = _mm512_loadu_si512(w.comp.data() + n);
        const __m512 scale = _mm512_loadu_ps(w.scale.data() + n);
        const __m512 b = bias ? _mm512_maskz_loadu_ps(live, bias + n) : _mm512_setzero_ps();
        for (int r = 0; r < MR; ++r) {
            __m512 v = _mm512_cvtepi32_ps(_mm512_add_epi32(acc[r][j], comp));
            v = _mm512_mul_ps(v, _mm512_set1_ps(inv[r]));
            v = _mm512_div_ps(v, scale);
            if (bias) v = _mm512_add_ps(v, b);
            _mm512_mask_storeu_ps(y + r * ldy + n, live, v);
        }
    }
}

void gemm(const uint8_t* u, const float* inv, int64_t t0, int64_t t1, const S8Matrix& w,
          int64_t b0, int64_t b1, const float* bias, float* y, int64_t ldy) {
    const int64_t n_k4 = w.cols_pad / 4, ldu = w.cols_pad;
    for (int64_t b = b0; b < b1; b += 2) {
        const int8_t* blk = w.packed.data() + b * w.cols_pad * kBlock;
        const int64_t n0 = b * kBlock;
        for (int64_t t = t0; t < t1; t += kMaxTokens) {
            const int64_t m = std::min<int64_t>(kMaxTokens, t1 - t);
            const uint8_t* a = u + t * ldu;
            float* out = y + t * ldy;
            switch (m) {
                case 6: micro<6>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                case 5: micro<5>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                case 4: micro<4>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                case 3: micro<3>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                case 2: micro<2>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                default: micro<1>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
            }
        }
    }
}

const Kernels kVnni{quantize_rows, gemm};

}  // namespace

const Kernels* avx512() { return &kVnni; }
#else
const Kernels* avx512() { return nullptr; }
#endif

}  // namespace dasllama::nn::s8_kernels
