// A float32 product for many tokens against float32 weights, blocked along the summed
// dimension, with the bias and an activation applied as the outputs are stored:
//     Y[t, r] = act(sum_c W[r, c] * X[t, c] + bias[r])
// for the long products of an audio encoder (1500 frames against 384..1536-wide rows).
//
// cpu::matmul's float path keeps every output's partial sums in vector lanes along the
// summed dimension and reads both operands' whole rows per register tile: with a long
// reduction (1536 columns) and few rows, the tiles' rows stop fitting in L1 and the product
// runs from L2 at a third of the speed it reaches at 384 columns. Here the weights are
// repacked once per call into panels of 32 rows, column by column; a tile of 12 tokens x 32
// rows runs over kBlockCols columns of one panel (16 KiB, held in L1 while the token tiles
// pass over it), broadcasting each token's value against the panel's two vectors, and adds
// its sums into Y block by block.
//
// Summation order (fixed, the same for every token count, tile and thread split): output
// (t, r) is the sum, block by block, of its column blocks [kBlockCols j, kBlockCols (j + 1)),
// each block one chain of fused multiply-adds in column order starting from zero; then
// + bias[r], then the activation. The generic kernel computes that order with std::fma, so
// every variant gives the same bits (tests/cpp/test_matmul_f32.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::cpu {

enum class F32Activation {
    kNone,
    kGeluErf,   // x/2 (1 + erf(x / sqrt 2)), by nn/activations' vector formula
};

// Columns summed per block (see the order above). A panel's block is 32 x 128 floats, 16 KiB:
// with a tile's 12 token rows (6 KiB) it stays in a 48 KiB L1.
constexpr int64_t kBlockCols = 128;

// Whether this CPU runs a vector kernel for matmul_f32_blocked (AVX-512 or AVX2). Without one,
// callers keep cpu::matmul: the generic kernel is the test reference, not a fast path.
bool matmul_f32_blocked_fast();

// Y (n_tokens rows, ldy floats apart) as above, for X rows ldx floats apart (ldx may be less
// than cols: rows may overlap, as a convolution's windows do). bias may be null. W must be
// F32 or F16 (widened exactly as the panels are packed: the bits of the F32 matrix of the same
// values); FormatError otherwise. Split over the pool.
void matmul_f32_blocked(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                        float* y, int64_t ldy, ThreadPool& pool, const float* bias = nullptr,
                        F32Activation act = F32Activation::kNone);

// --- variants, for tests -------------------------------------------------------------------------
std::vector<std::string> matmul_f32_blocked_variants();   // best first, ends with "generic"
void matmul_f32_blocked_with(std::string_view variant, const WeightMatrix& w, const float* x,
                             int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                             ThreadPool& pool, const float* bias = nullptr,
                             F32Activation act = F32Activation::kNone);

namespace blocked {
// Panels of 32 rows: panel p holds rows [32p, 32p + 32) of W as cols x 32 floats, column c
// at 32c (rows past the matrix are zero). A kernel computes rows [32 p0, 32 p0 + 32 n_panels)
// (at most n_rows of them) for n_tokens tokens, all columns, bias and activation included.
constexpr int kPanelRows = 32;
struct Kernels {
    const char* isa;
    void (*panels)(const float* packed, int64_t cols, int64_t n_panels, int64_t n_rows,
                   const float* x, int64_t ldx, int64_t n_tokens, float* y, int64_t ldy,
                   const float* bias, F32Activation act);
};
const Kernels* kernels_avx512();   // matmul_f32_blocked_avx512.cpp (x86-64 builds only)
const Kernels* kernels_avx2();     // matmul_f32_blocked_avx2.cpp (x86-64 builds only)
}  // namespace blocked

}  // namespace dasllama::cpu
