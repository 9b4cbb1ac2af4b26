// matmul_f32_blocked's kernel for AVX-512 F/DQ (built with DASLLAMA_ISA_FLAGS_avx512).
//
// A tile is T <= 12 tokens x one panel of 32 rows: 2T accumulators (24 of the 32 registers),
// per column two panel loads and T broadcasts feed 2T fused multiply-adds, so the FMA units
// set the pace, not the loads. Column blocks run outermost in a task: one panel's block
// (16 KiB) serves every token tile of the task from L1 before the next block is read.
#include <algorithm>

#include "cpu/matmul_f32_blocked.h"
#include "cpu/simd_x86.h"

namespace dasllama::cpu::blocked {

#if defined(__AVX512F__) && defined(__AVX512DQ__)
namespace {

constexpr int kTileTokens = 12;

inline __mmask16 lanes(int64_t n) {   // the first min(n, 16) lanes, n >= 0
    return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

// Columns [c0, c0 + kc) of one panel (pw at its column c0) times T tokens (x at column c0)
// into y: the block's sums added to y's (first block: stored), and on the last block the
// bias and the activation. m0, m1: the panel's rows present in its two vectors.
template <int T>
inline void tile(const float* pw, int64_t kc, const float* x, int64_t ldx, float* y,
                 int64_t ldy, __mmask16 m0, __mmask16 m1, bool first, bool last,
                 const float* bias, F32Activation act) {
    __m512 a0[T], a1[T];
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < kc; ++c) {
        const __m512 w0 = _mm512_loadu_ps(pw + c * kPanelRows);
        const __m512 w1 = _mm512_loadu_ps(pw + c * kPanelRows + 16);
#pragma GCC unroll 12
        for (int t = 0; t < T; ++t) {
            const __m512 b = _mm512_set1_ps(x[t * ldx + c]);
            a0[t] = _mm512_fmadd_ps(w0, b, a0[t]);
            a1[t] = _mm512_fmadd_ps(w1, b, a1[t]);
        }
    }
    __m512 b0 = _mm512_setzero_ps(), b1 = b0;
    if (last && bias) {
        b0 = _mm512_maskz_loadu_ps(m0, bias);
        b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
    }
#pragma GCC unroll 12
    for (int t = 0; t < T; ++t) {
        float* yt = y + t * ldy;
        __m512 v0 = a0[t], v1 = a1[t];
        if (!first) {
            v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, yt), v0);
            v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, yt + 16), v1);
        }
        if (last) {
            if (bias) {
                v0 = _mm512_add_ps(v0, b0);
                v1 = _mm512_add_ps(v1, b1);
            }
            if (act == F32Activation::kGeluErf) {
                v0 = simd_x86::gelu_erf_avx512(v0);
                v1 = simd_x86::gelu_erf_avx512(v1);
            }
        }
        _mm512_mask_storeu_ps(yt, m0, v0);
        _mm512_mask_storeu_ps(yt + 16, m1, v1);
    }
}

template <int T>
void tile_fn(const float* pw, int64_t kc, const float* x, int64_t ldx, float* y, int64_t ldy,
             __mmask16 m0, __mmask16 m1, bool first, bool last, const float* bias,
             F32Activation act) {
    tile<T>(pw, kc, x, ldx, y, ldy, m0, m1, first, last, bias, act);
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t,
                        __mmask16, __mmask16, bool, bool, const float*, F32Activation);
constexpr TileFn kTiles[kTileTokens + 1] = {
    nullptr,     tile_fn<1>, tile_fn<2>, tile_fn<3>,  tile_fn<4>,  tile_fn<5>, tile_fn<6>,
    tile_fn<7>,  tile_fn<8>, tile_fn<9>, tile_fn<10>, tile_fn<11>, tile_fn<12>};

void panels_avx512(const float* packed, int64_t cols, int64_t n_panels, int64_t n_rows,
                   const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                   const float* bias, F32Activation act) {
    for (int64_t c0 = 0; c0 < cols; c0 += kBlockCols) {
        const int64_t kc = std::min(kBlockCols, cols - c0);
        const bool first = c0 == 0, last = c0 + kc >= cols;
        for (int64_t p = 0; p < n_panels; ++p) {
            const int64_t left = n_rows - p * kPanelRows;   // rows of this panel present
            const __mmask16 m0 = lanes(left), m1 = lanes(std::max<int64_t>(left - 16, 0));
            const float* pw = packed + p * cols * kPanelRows + c0 * kPanelRows;
            const float* pb = bias ? bias + p * kPanelRows : nullptr;
            float* yp = y + p * kPanelRows;
            for (int64_t t = 0; t < n_tokens; t += kTileTokens) {
                const int nt = int(std::min<int64_t>(kTileTokens, n_tokens - t));
                kTiles[nt](pw, kc, x + t * ldx + c0, ldx, yp + t * ldy, ldy, m0, m1, first,
                           last, pb, act);
            }
        }
    }
}

const Kernels table{"avx512", panels_avx512};

}  // namespace

const Kernels* kernels_avx512() { return &table; }
#else
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace dasllama::cpu::blocked
