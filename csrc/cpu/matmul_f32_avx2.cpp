// The float matmul path for AVX2 + FMA + F16C (built with DASLLAMA_ISA_FLAGS_avx2): float32
// rows, and Q8_0 rows widened in registers, against float32 activations (Precision::kF32).
//
// As matmul_f32_avx512.cpp with 8-lane vectors and 16 registers. The one summation order of
// every kernel here: two chains per output, chain 0 taking columns [16j, 16j + 8) and chain 1
// [16j + 8, 16j + 16) (a last partial group fills chain 0 first), summed by hsum4's tree.
// Tiles of 2 rows x 2 tokens (8 accumulators); one token runs a row at a time (the walk over
// rows and tokens is matmul_f32_tiles.h's).
#include <algorithm>

#include "cpu/kernels_matmul.h"
#include "cpu/matmul_f32_tiles.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::mm {
namespace {

using simd_x86::load_f16;

// [sum a0, sum a1, sum a2, sum a3]; each lane of the result depends on its own input only.
inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Stores the sums of n <= 4 vectors at y[0], y[1], ...
inline void store_sums(const __m256 (&v)[4], int n, float* y) {
    alignas(16) float s[4];
    _mm_store_ps(s, hsum4(v[0], v[1], v[2], v[3]));
    for (int i = 0; i < n; ++i) y[i] = s[i];
}

// Lanes below n (n may be <= 0 or >= 8).
inline __m256i lane_mask(int64_t n) {
    const int k = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(8, n)));
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// --- float32 rows -----------------------------------------------------------------------------

template <int R, int T>
inline void f32_step(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t c,
                     const __m256i* m, __m256 (&acc)[R][T]) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t)
        xv[t] = m ? _mm256_maskload_ps(x + t * ldx + c, *m) : _mm256_loadu_ps(x + t * ldx + c);
    for (int i = 0; i < R; ++i) {
        __m256 wv = m ? _mm256_maskload_ps(w + i * ldw + c, *m) : _mm256_loadu_ps(w + i * ldw + c);
        asm("" : "+x"(wv));  // one load, not one folded into each multiply-add
        for (int t = 0; t < T; ++t) acc[i][t] = _mm256_fmadd_ps(wv, xv[t], acc[i][t]);
    }
}

template <int R, int T>
void f32_tile(const float* w, int64_t ldw, int64_t cols, const float* x, int64_t ldx, float* y,
              int64_t ldy) {
    __m256 c0[R][T], c1[R][T];
    for (int i = 0; i < R; ++i)
        for (int t = 0; t < T; ++t) c0[i][t] = c1[i][t] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        f32_step<R, T>(w, ldw, x, ldx, c, nullptr, c0);
        f32_step<R, T>(w, ldw, x, ldx, c + 8, nullptr, c1);
    }
    if (c < cols) {  // masked tail: masked-off lanes are not read
        const __m256i m0 = lane_mask(cols - c), m1 = lane_mask(cols - c - 8);
        f32_step<R, T>(w, ldw, x, ldx, c, &m0, c0);
        if (cols - c > 8) f32_step<R, T>(w, ldw, x, ldx, c + 8, &m1, c1);
    }
    for (int t = 0; t < T; ++t) {
        __m256 v[4] = {};
        for (int i = 0; i < R; ++i) v[i] = _mm256_add_ps(c0[i][t], c1[i][t]);
        store_sums(v, R, y + t * ldy);
    }
}

inline __m256 f32_row(const float* w, const float* x, int64_t cols) {
    __m256 c0[1][1] = {{_mm256_setzero_ps()}}, c1[1][1] = {{_mm256_setzero_ps()}};
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        c0[0][0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + c), _mm256_loadu_ps(x + c), c0[0][0]);
        c1[0][0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + c + 8), _mm256_loadu_ps(x + c + 8),
                                   c1[0][0]);
    }
    if (c < cols) {
        const __m256i m0 = lane_mask(cols - c), m1 = lane_mask(cols - c - 8);
        f32_step<1, 1>(w, 0, x, 0, c, &m0, c0);
        if (cols - c > 8) f32_step<1, 1>(w, 0, x, 0, c + 8, &m1, c1);
    }
    return _mm256_add_ps(c0[0][0], c1[0][0]);
}

// --- Q8_0 rows --------------------------------------------------------------------------------

constexpr int64_t kQ8Bytes = 34;  // f16 scale + 32 int8

// Elements [8e, 8e + 8) of a Q8_0 block as float32: d * q, exact.
inline __m256 q8_part(const uint8_t* block, __m256 d, int e) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(block + 2 + 8 * e));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

// Parts 0 and 2 of a block go to chain 0, parts 1 and 3 to chain 1.
template <int R, int T>
void q8_tile(const uint8_t* w, int64_t wrb, int64_t nb, const float* x, int64_t ldx, float* y,
             int64_t ldy) {
    __m256 c[2][R][T];
    for (int h = 0; h < 2; ++h)
        for (int i = 0; i < R; ++i)
            for (int t = 0; t < T; ++t) c[h][i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b)
        for (int e = 0; e < 4; ++e) {
            __m256 xv[T];
            for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + 32 * b + 8 * e);
            for (int i = 0; i < R; ++i) {
                const uint8_t* block = w + i * wrb + b * kQ8Bytes;
                const __m256 wv = q8_part(block, _mm256_set1_ps(load_f16(block)), e);
                for (int t = 0; t < T; ++t)
                    c[e % 2][i][t] = _mm256_fmadd_ps(wv, xv[t], c[e % 2][i][t]);
            }
        }
    for (int t = 0; t < T; ++t) {
        __m256 v[4] = {};
        for (int i = 0; i < R; ++i) v[i] = _mm256_add_ps(c[0][i][t], c[1][i][t]);
        store_sums(v, R, y + t * ldy);
    }
}

inline __m256 q8_row(const uint8_t* w, int64_t nb, const float* x) {
    __m256 c0 = _mm256_setzero_ps(), c1 = c0;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = w + b * kQ8Bytes;
        const __m256 d = _mm256_set1_ps(load_f16(block));
        const float* xb = x + 32 * b;
        c0 = _mm256_fmadd_ps(q8_part(block, d, 0), _mm256_loadu_ps(xb), c0);
        c1 = _mm256_fmadd_ps(q8_part(block, d, 1), _mm256_loadu_ps(xb + 8), c1);
        c0 = _mm256_fmadd_ps(q8_part(block, d, 2), _mm256_loadu_ps(xb + 16), c0);
        c1 = _mm256_fmadd_ps(q8_part(block, d, 3), _mm256_loadu_ps(xb + 24), c1);
    }
    return _mm256_add_ps(c0, c1);
}

// The kernel set of matmul_f32_tiles.h: 2 x 2 tiles, no software prefetch.
struct Avx2 {
    using Vec = __m256;
    static void store_sums(const __m256 (&v)[4], int n, float* y) { mm::store_sums(v, n, y); }
    static __m256 f32_row(const float* w, const float* x, int64_t cols) {
        return mm::f32_row(w, x, cols);
    }
    static __m256 q8_row(const uint8_t* w, int64_t nb, const float* x) {
        return mm::q8_row(w, nb, x);
    }
    template <int R, int T>
    static void f32_tile(const float* w, int64_t ldw, int64_t cols, const float* x, int64_t ldx,
                         float* y, int64_t ldy) {
        mm::f32_tile<R, T>(w, ldw, cols, x, ldx, y, ldy);
    }
    template <int R, int T>
    static void q8_tile(const uint8_t* w, int64_t wrb, int64_t nb, const float* x, int64_t ldx,
                        float* y, int64_t ldy) {
        mm::q8_tile<R, T>(w, wrb, nb, x, ldx, y, ldy);
    }
    static constexpr int kF32Rows = 2, kF32Tokens = 2, kQ8Rows = 2, kQ8Tokens = 2;
    static void q8_prefetch(const uint8_t*, const uint8_t*) {}
};

}  // namespace

void gemm_f32_avx2(const float* w, int64_t ldw, int64_t n_rows, int64_t cols, const float* x,
                   int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    f32_tiles::gemm_f32<Avx2>(w, ldw, n_rows, cols, x, ldx, n_tokens, y, ldy);
}

void gemm_q8_0_f32_avx2(const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols,
                        const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    f32_tiles::gemm_q8_0_f32<Avx2>(w, wrb, n_rows, cols, x, ldx, n_tokens, y, ldy);
}

void dequantize_f16_avx2(const uint8_t* src, float* dst, int64_t cols) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8)
        _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(
                                      reinterpret_cast<const __m128i*>(src + 2 * c))));
    for (; c < cols; ++c) dst[c] = load_f16(src + 2 * c);
}

void dequantize_q8_0_avx2(const uint8_t* src, float* dst, int64_t cols) {
    for (int64_t b = 0; b < cols / 32; ++b, src += kQ8Bytes, dst += 32) {
        const __m256 d = _mm256_set1_ps(load_f16(src));
        for (int e = 0; e < 4; ++e) _mm256_storeu_ps(dst + 8 * e, q8_part(src, d, e));
    }
}

}  // namespace dasllama::cpu::mm
