// matmul_f32_blocked's kernel for AVX2 with FMA (built with DASLLAMA_ISA_FLAGS_avx2).
//
// With 16 registers a tile is T <= 6 tokens x one half of a panel (16 rows, two vectors):
// 2T accumulators, per column two panel loads and T broadcasts feed 2T fused multiply-adds.
// The two halves of a panel run one after the other over the same column block, so the block
// (16 KiB) still serves every token tile from L1. Each output's sums follow the order of
// matmul_f32_blocked.h, so the results equal the generic kernel's bit for bit.
#include <immintrin.h>

#include <algorithm>

#include "cpu/matmul_f32_blocked.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::blocked {

#if defined(__AVX2__) && defined(__FMA__)
namespace {

constexpr int kTileTokens = 6;
constexpr int64_t kHalf = kPanelRows / 2;

inline __m256i lanes(int64_t n) {   // the first min(max(n, 0), 8) lanes, as a mask
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))), idx);
}

// Columns [c0, c0 + kc) of one half panel (pw at its column c0 and first row) times T tokens
// into y (at the half's first row): as the AVX-512 tile, on 16 rows.
template <int T>
void tile(const float* pw, int64_t kc, const float* x, int64_t ldx, float* y, int64_t ldy,
          __m256i m0, __m256i m1, bool first, bool last, const float* bias, F32Activation act) {
    __m256 a0[T], a1[T];
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t c = 0; c < kc; ++c) {
        const __m256 w0 = _mm256_loadu_ps(pw + c * kPanelRows);
        const __m256 w1 = _mm256_loadu_ps(pw + c * kPanelRows + 8);
#pragma GCC unroll 6
        for (int t = 0; t < T; ++t) {
            const __m256 b = _mm256_broadcast_ss(x + t * ldx + c);
            a0[t] = _mm256_fmadd_ps(w0, b, a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, b, a1[t]);
        }
    }
    __m256 b0 = _mm256_setzero_ps(), b1 = b0;
    if (last && bias) {
        b0 = _mm256_maskload_ps(bias, m0);
        b1 = _mm256_maskload_ps(bias + 8, m1);
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
        float* yt = y + t * ldy;
        __m256 v0 = a0[t], v1 = a1[t];
        if (!first) {
            v0 = _mm256_add_ps(_mm256_maskload_ps(yt, m0), v0);
            v1 = _mm256_add_ps(_mm256_maskload_ps(yt + 8, m1), v1);
        }
        if (last) {
            if (bias) {
                v0 = _mm256_add_ps(v0, b0);
                v1 = _mm256_add_ps(v1, b1);
            }
            if (act == F32Activation::kGeluErf) {
                v0 = simd_x86::gelu_erf_avx2(v0);
                v1 = simd_x86::gelu_erf_avx2(v1);
            }
        }
        _mm256_maskstore_ps(yt, m0, v0);
        _mm256_maskstore_ps(yt + 8, m1, v1);
    }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, __m256i,
                        __m256i, bool, bool, const float*, F32Activation);
constexpr TileFn kTiles[kTileTokens + 1] = {nullptr, tile<1>, tile<2>, tile<3>,
                                            tile<4>, tile<5>, tile<6>};

void panels_avx2(const float* packed, int64_t cols, int64_t n_panels, int64_t n_rows,
                 const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                 const float* bias, F32Activation act) {
    for (int64_t c0 = 0; c0 < cols; c0 += kBlockCols) {
        const int64_t kc = std::min(kBlockCols, cols - c0);
        const bool first = c0 == 0, last = c0 + kc >= cols;
        for (int64_t p = 0; p < n_panels; ++p)
            for (int64_t h = 0; h < 2; ++h) {
                const int64_t r0 = p * kPanelRows + h * kHalf;
                const int64_t left = n_rows - r0;   // rows of this half present
                if (left <= 0) break;
                const __m256i m0 = lanes(left), m1 = lanes(left - 8);
                const float* pw = packed + p * cols * kPanelRows + c0 * kPanelRows + h * kHalf;
                const float* pb = bias ? bias + r0 : nullptr;
                for (int64_t t = 0; t < n_tokens; t += kTileTokens) {
                    const int nt = int(std::min<int64_t>(kTileTokens, n_tokens - t));
                    kTiles[nt](pw, kc, x + t * ldx + c0, ldx, y + t * ldy + r0, ldy, m0, m1,
                               first, last, pb, act);
                }
            }
    }
}

const Kernels table{"avx2", panels_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &table; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace dasllama::cpu::blocked
