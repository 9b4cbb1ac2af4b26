// linear_s8's kernels on AVX2 (built with DASLLAMA_ISA_FLAGS_avx2), for the x86-64 CPUs without
// VNNI: the activation rule 8 values at a time, and the product of up to 4 token rows against
// one packed block of 16 weight rows, exact in integers.
//
// AVX2's only byte product, vpmaddubsw (u8 x s8, pairs summed into a saturating int16), would
// saturate on u = x_q + 128 (2 x 255 x 127 > 32767). It takes the signed values instead:
// a = u - 128 (in [-127, 127]: the activation rule never rounds to u = 0 inside a row, only
// the zero padding does, where every weight is 0) against w as |w| x sign(a, w), so a pair is
// at most 2 x 128 x 127 = 32512 and nothing saturates. The sum over a row is then
// sum_k (u - 128) w = sum_k u w + comp: the integer every other kernel computes.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "nn/linear_s8.h"

namespace dasllama::nn::s8_kernels {

#if defined(__AVX2__) && defined(__FMA__)
namespace {

constexpr int64_t kBlock = 16;
constexpr int kMaxTokens = 4;   // token rows per micro-tile: 8 accumulators, 8 registers spare

float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

uint8_t u8_of(float x, float s) {   // the generic rule, for a row's last cols % 8 values
    const float v = std::nearbyint(std::fma(x, s, 128.f));
    return uint8_t(std::min(255.f, std::max(0.f, v)));
}

void quantize_rows(const float* x, int64_t t0, int64_t t1, int64_t cols, int64_t cols_pad,
                   uint8_t* u, float* inv) {
    const __m256 sign = _mm256_set1_ps(-0.f), shift = _mm256_set1_ps(128.f);
    const __m256i lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(255);
    const int64_t full = cols / 8 * 8;
    for (int64_t t = t0; t < t1; ++t) {
        const float* r = x + t * cols;
        __m256 m = _mm256_setzero_ps();
        for (int64_t k = 0; k < full; k += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(r + k)));
        float amax = hmax(m);
        for (int64_t k = full; k < cols; ++k) amax = std::max(amax, std::fabs(r[k]));
        const float s = amax != 0.f ? 127.f / amax : 1.f;
        inv[t] = 1.f / s;
        const __m256 vs = _mm256_set1_ps(s);
        uint8_t* o = u + t * cols_pad;
        for (int64_t k = 0; k < full; k += 8) {
            // one rounding for x * s + 128 (fused), then round half to even
            const __m256 f = _mm256_round_ps(_mm256_fmadd_ps(_mm256_loadu_ps(r + k), vs, shift),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            const __m256i q = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(f), lo), hi);
            alignas(32) int32_t lanes[8];
            _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), q);
            for (int i = 0; i < 8; ++i) o[k + i] = uint8_t(lanes[i]);
        }
        for (int64_t k = full; k < cols; ++k) o[k] = u8_of(r[k], s);
        std::fill(o + cols, o + cols_pad, uint8_t(0));
    }
}

// Lanes [0, n) of 8 set, as a maskload/maskstore mask.
__m256i lanes_below(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::min<int64_t>(n, 8))), idx);
}

template <int MR>
void micro(const uint8_t* u, int64_t ldu, const float* inv, const int8_t* blk, int64_t n_k4,
           const S8Matrix& w, int64_t n0, const float* bias, float* y, int64_t ldy) {
    __m256i acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(char(0x80));
    for (int64_t g = 0; g < n_k4; ++g) {
        // one 64-byte line: 4 columns of rows 0-7, then of rows 8-15
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + g * 64));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + g * 64 + 32));
        const __m256i m0 = _mm256_abs_epi8(w0), m1 = _mm256_abs_epi8(w1);
        for (int r = 0; r < MR; ++r) {
            int32_t a4;
            __builtin_memcpy(&a4, u + r * ldu + g * 4, 4);
            const __m256i a = _mm256_xor_si256(_mm256_set1_epi32(a4), flip);   // u - 128
            const __m256i p0 = _mm256_maddubs_epi16(m0, _mm256_sign_epi8(a, w0));
            const __m256i p1 = _mm256_maddubs_epi16(m1, _mm256_sign_epi8(a, w1));
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(p0, ones));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(p1, ones));
        }
    }
    for (int h = 0; h < 2; ++h) {
        const int64_t n = n0 + h * 8;
        if (n >= w.rows) break;
        const __m256i live = lanes_below(w.rows - n);
        const __m256 scale = _mm256_loadu_ps(w.scale.data() + n);   // rows_pad values: no mask
        const __m256 b = bias ? _mm256_maskload_ps(bias + n, live) : _mm256_setzero_ps();
        for (int r = 0; r < MR; ++r) {
            __m256 v = _mm256_cvtepi32_ps(acc[r][h]);
            v = _mm256_mul_ps(v, _mm256_set1_ps(inv[r]));
            v = _mm256_div_ps(v, scale);
            if (bias) v = _mm256_add_ps(v, b);
            _mm256_maskstore_ps(y + r * ldy + n, live, v);
        }
    }
}

void gemm(const uint8_t* u, const float* inv, int64_t t0, int64_t t1, const S8Matrix& w,
          int64_t b0, int64_t b1, const float* bias, float* y, int64_t ldy) {
    const int64_t n_k4 = w.cols_pad / 4, ldu = w.cols_pad;
    for (int64_t b = b0; b < b1; ++b) {
        const int8_t* blk = w.packed.data() + b * w.cols_pad * kBlock;
        const int64_t n0 = b * kBlock;
        for (int64_t t = t0; t < t1; t += kMaxTokens) {
            const int64_t m = std::min<int64_t>(kMaxTokens, t1 - t);
            const uint8_t* a = u + t * ldu;
            float* out = y + t * ldy;
            switch (m) {
                case 4: micro<4>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                case 3: micro<3>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                case 2: micro<2>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
                default: micro<1>(a, ldu, inv + t, blk, n_k4, w, n0, bias, out, ldy); break;
            }
        }
    }
}

const Kernels kAvx2{quantize_rows, gemm};

}  // namespace

const Kernels* avx2() { return &kAvx2; }
#else
const Kernels* avx2() { return nullptr; }
#endif

}  // namespace dasllama::nn::s8_kernels
