// The float matmul path for AVX-512 F/DQ/VL (built with DASLLAMA_ISA_FLAGS_avx512): float32
// rows, and Q8_0 rows widened in registers, against float32 activations (Precision::kF32).
//
// Both operands run along the summed dimension (y = x W^T), so every output keeps vector
// accumulators of 16 partial sums and reduces them once at the end. One summation order serves
// every kernel here, so a token's result does not depend on the tokens sharing its call
// (decode equals prefill bit for bit, as with one dot product per output):
//   two chains per output: chain 0 takes columns [32j, 32j + 16), chain 1 [32j + 16, 32j + 32)
//   (a last partial group fills chain 0 first); the output is the lanes' sum of chain 0 +
//   chain 1 by hsum4's fixed tree.
// Tiles: 4 rows x 3 tokens for many tokens (24 accumulators; per 32 columns 14 loads feed 24
// fused multiply-adds: the FMA unit sets the pace; 4 x 2 ran 10-30% slower). One token runs a
// row at a time: one sequential stream a row read the weights about twice as fast as 4-row
// tiles did.
#include <algorithm>

#include "cpu/kernels_matmul.h"
#include "cpu/matmul_f32_tiles.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::mm {
namespace {

using simd_x86::load_f16;

// [sum a0, sum a1, sum a2, sum a3]: 256-bit halves added, then three horizontal adds. Each
// lane of the result depends on its own input only.
inline __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    auto half = [](__m512 v) {
        return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    };
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(half(a0), half(a1)),
                                    _mm256_hadd_ps(half(a2), half(a3)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Stores the sums of n <= 4 vectors at y[0], y[stride], ...
inline void store_sums(const __m512 (&v)[4], int n, float* y, int64_t stride) {
    alignas(16) float s[4];
    _mm_store_ps(s, hsum4(v[0], v[1], v[2], v[3]));
    for (int i = 0; i < n; ++i) y[i * stride] = s[i];
}

// The masks of a group of 32 columns with `rem` of them present: chain 0's, chain 1's.
inline __mmask16 mask0(int64_t rem) {
    return rem >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << rem) - 1);
}
inline __mmask16 mask1(int64_t rem) {
    return rem >= 32 ? __mmask16(0xffff)
                     : rem <= 16 ? __mmask16(0) : static_cast<__mmask16>((1u << (rem - 16)) - 1);
}

// --- float32 rows -----------------------------------------------------------------------------

// R rows x T tokens, columns [c, c + 16) masked by m, into chain `acc`.
template <int R, int T>
inline void f32_step(const float* w, int64_t ldw, const float* x, int64_t ldx, int64_t c,
                     __mmask16 m, __m512 (&acc)[R][T]) {
    __m512 xv[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + c);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
        __m512 wv = _mm512_maskz_loadu_ps(m, w + i * ldw + c);
        // In a register: GCC would otherwise fold the load into each of the T multiply-adds
        // and read the same vector T times (the loads, not the FMAs, then set the pace).
        asm("" : "+v"(wv));
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
    }
}

template <int R, int T>
void f32_tile(const float* w, int64_t ldw, int64_t cols, const float* x, int64_t ldx, float* y,
              int64_t ldy) {
    __m512 c0[R][T], c1[R][T];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) c0[i][t] = c1[i][t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
        f32_step<R, T>(w, ldw, x, ldx, c, 0xffff, c0);
        f32_step<R, T>(w, ldw, x, ldx, c + 16, 0xffff, c1);
    }
    if (c < cols) {  // masked tail: masked-off lanes are neither read nor faulted on
        f32_step<R, T>(w, ldw, x, ldx, c, mask0(cols - c), c0);
        if (mask1(cols - c)) f32_step<R, T>(w, ldw, x, ldx, c + 16, mask1(cols - c), c1);
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        __m512 v[4] = {};
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) v[i] = _mm512_add_ps(c0[i][t], c1[i][t]);
        store_sums(v, R, y + t * ldy, 1);
    }
}

// One row against one token: chain 0 + chain 1, unreduced.
inline __m512 f32_row(const float* w, const float* x, int64_t cols) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0;
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
        c0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c), _mm512_loadu_ps(x + c), c0);
        c1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + c + 16), _mm512_loadu_ps(x + c + 16), c1);
    }
    if (c < cols) {
        const __mmask16 m0 = mask0(cols - c), m1 = mask1(cols - c);
        c0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, w + c), _mm512_maskz_loadu_ps(m0, x + c),
                             c0);
        if (m1)
            c1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, w + c + 16),
                                 _mm512_maskz_loadu_ps(m1, x + c + 16), c1);
    }
    return _mm512_add_ps(c0, c1);
}

// --- Q8_0 rows --------------------------------------------------------------------------------

constexpr int64_t kQ8Bytes = 34;  // f16 scale + 32 int8

// Elements [16h, 16h + 16) of a Q8_0 block as float32: d * q, exact.
inline __m512 q8_half(const uint8_t* block, __m512 d, int h) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + 16 * h));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

// A block's halves are the two chains' columns.
template <int R, int T>
void q8_tile(const uint8_t* w, int64_t wrb, int64_t nb, const float* x, int64_t ldx, float* y,
             int64_t ldy) {
    __m512 c0[R][T], c1[R][T];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) c0[i][t] = c1[i][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        __m512 x0[T], x1[T];
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t) {
            x0[t] = _mm512_loadu_ps(x + t * ldx + 32 * b);
            x1[t] = _mm512_loadu_ps(x + t * ldx + 32 * b + 16);
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
            const uint8_t* block = w + i * wrb + b * kQ8Bytes;
            const __m512 d = _mm512_set1_ps(load_f16(block));
            const __m512 w0 = q8_half(block, d, 0), w1 = q8_half(block, d, 1);
#pragma GCC unroll 4
            for (int t = 0; t < T; ++t) {
                c0[i][t] = _mm512_fmadd_ps(w0, x0[t], c0[i][t]);
                c1[i][t] = _mm512_fmadd_ps(w1, x1[t], c1[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
        __m512 v[4] = {};
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) v[i] = _mm512_add_ps(c0[i][t], c1[i][t]);
        store_sums(v, R, y + t * ldy, 1);
    }
}

inline __m512 q8_row(const uint8_t* w, int64_t nb, const float* x) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0;
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* block = w + b * kQ8Bytes;
        const __m512 d = _mm512_set1_ps(load_f16(block));
        c0 = _mm512_fmadd_ps(q8_half(block, d, 0), _mm512_loadu_ps(x + 32 * b), c0);
        c1 = _mm512_fmadd_ps(q8_half(block, d, 1), _mm512_loadu_ps(x + 32 * b + 16), c1);
    }
    return _mm512_add_ps(c0, c1);
}

// A few tokens stream each weight row once: without software prefetch of the next row tile
// one thread read the weights at two thirds of the speed.
inline void prefetch(const uint8_t* begin, const uint8_t* end) {
    for (const uint8_t* p = begin; p < end; p += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}

// The kernel set of matmul_f32_tiles.h: float32 rows in 4 x 3 tiles, Q8_0 rows in 2 x 4
// tiles with the next row tile prefetched.
struct Avx512 {
    using Vec = __m512;
    static void store_sums(const __m512 (&v)[4], int n, float* y) { mm::store_sums(v, n, y, 1); }
    static __m512 f32_row(const float* w, const float* x, int64_t cols) {
        return mm::f32_row(w, x, cols);
    }
    static __m512 q8_row(const uint8_t* w, int64_t nb, const float* x) {
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
    static constexpr int kF32Rows = 4, kF32Tokens = 3, kQ8Rows = 2, kQ8Tokens = 4;
    static void q8_prefetch(const uint8_t* begin, const uint8_t* end) { prefetch(begin, end); }
};

}  // namespace

void gemm_f32_avx512(const float* w, int64_t ldw, int64_t n_rows, int64_t cols,
                     const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    f32_tiles::gemm_f32<Avx512>(w, ldw, n_rows, cols, x, ldx, n_tokens, y, ldy);
}

void gemm_q8_0_f32_avx512(const uint8_t* w, int64_t wrb, int64_t n_rows, int64_t cols,
                          const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy) {
    f32_tiles::gemm_q8_0_f32<Avx512>(w, wrb, n_rows, cols, x, ldx, n_tokens, y, ldy);
}

void dequantize_f16_avx512(const uint8_t* src, float* dst, int64_t cols) {
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16)
        _mm512_storeu_ps(dst + c, _mm512_cvtph_ps(_mm256_loadu_si256(
                                      reinterpret_cast<const __m256i*>(src + 2 * c))));
    for (; c < cols; ++c) dst[c] = load_f16(src + 2 * c);
}

void dequantize_q8_0_avx512(const uint8_t* src, float* dst, int64_t cols) {
    for (int64_t b = 0; b < cols / 32; ++b, src += kQ8Bytes, dst += 32) {
        const __m512 d = _mm512_set1_ps(load_f16(src));
        _mm512_storeu_ps(dst, q8_half(src, d, 0));
        _mm512_storeu_ps(dst + 16, q8_half(src, d, 1));
    }
}

}  // namespace dasllama::cpu::mm
