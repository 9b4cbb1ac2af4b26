// y = x W^T with both operands rounded to bfloat16 and float32 sums, on the AMX tile unit:
// the int8 lane's encoder linears (Whisper: 1500 rows of activations at a time), where 8-bit
// activations already round each product by about as much (2^-9 relative per bfloat16 value).
//
// Bf16Matrix holds W packed once at load in the tile unit's B layout: for each block of 16
// rows and 32 columns, 16 lines of 16 (column pair) values, [cols/2][16 rows][2]. gemm_bf16
// rounds x to bfloat16 once per call (rows padded to a multiple of 32 with zeros), then
// threads take (32 tokens x up to kRowGroup rows) tasks: 2 x 2 output tiles in tmm0-3, two
// token tiles and two row tiles of 32 columns per step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

struct Bf16Matrix {
    int64_t rows = 0, cols = 0;       // rows % 32 == 0, cols % 32 == 0
    std::vector<uint16_t> packed;     // rows * cols bfloat16 values, tile layout (above)
};

// Whether this build and CPU run gemm_bf16 (AMX-BF16 built and allowed).
bool gemm_bf16_available();

// W [rows, cols] float32 -> its packed bfloat16 form. Throws ShapeError unless rows and cols
// are positive multiples of 32.
Bf16Matrix pack_bf16(const float* w, int64_t rows, int64_t cols);

// Working memory of gemm_bf16, grown to the largest call.
struct Bf16GemmScratch {
    std::vector<uint16_t> x;   // the activations in bfloat16, rows padded to 32
};

// y [n, rows] = x [n, cols] W^T (row strides cols and rows). Throws Error when
// gemm_bf16_available() is false, ShapeError for n < 0.
void gemm_bf16(const Bf16Matrix& w, const float* x, int64_t n, float* y, ThreadPool& pool,
               Bf16GemmScratch& scratch);

namespace gemm_amx {
// Rows of W per task: a task's packed rows (kRowGroup x cols bfloat16) stay in L2 while its
// 32 tokens stream through.
constexpr int64_t kRowGroup = 256;
// The kernels of gemm_bf16_amx.cpp (nullptr entries when the build has no AMX).
struct Kernels {
    // bf16 copy of n float rows of `cols` (row stride cols), rows n..n_pad zero.
    void (*round_rows)(const float* x, int64_t n, int64_t n_pad, int64_t cols, uint16_t* out);
    // y rows [t0, min(t0 + 32, n)) x columns [r0, r1) of the product (r0, r1 multiples of 32);
    // xb holds 32 rows from t0 on.
    void (*tile_block)(const uint16_t* xb, int64_t cols, const uint16_t* packed, int64_t r0,
                       int64_t r1, int64_t rows_left, float* y, int64_t ldy);
};
const Kernels* kernels();   // nullptr when not built
}  // namespace gemm_amx

}  // namespace dasllama::nn
