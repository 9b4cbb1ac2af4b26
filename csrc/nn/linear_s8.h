// Linear layers in 8-bit integers with one float scale per weight row and per activation row:
// the numerics of CTranslate2's int8 lane on x86 (what faster-whisper's compute_type="int8"
// runs), so that a model quantized here rounds every value as it does there.
//
//   weights, once:      s_w[n] = amax == 0 ? 1 : 127 / amax(W[n, :])    (float32 division)
//                       q_w[n, k] = sat_s8(rne(W[n, k] * s_w[n]))
//   activations, per row of x:
//                       s_x[m] = amax == 0 ? 1 : 127 / amax(x[m, :])
//                       u[m, k] = sat_u8(rne(fma(x[m, k], s_x[m], 128)))   (unsigned, +128)
//   integer product:    C[m, n] = sum_k u[m, k] q_w[n, k] + comp[n],  comp[n] = -128 sum_k q_w[n, k]
//                       (= sum_k (u - 128) q_w exactly)
//   output:             y[m, n] = (float(C) * (1 / s_x[m])) / s_w[n] + bias[n]
//
// The +128 and its compensation are how the u8 x s8 dot-product instructions (AVX-512 VNNI,
// AMX-INT8) take a signed operand; the rounding of the shifted value (one fused multiply-add,
// then round-half-even) is kept because it decides the 8-bit value at ties. An embedding row
// reads back as float(q_w[n, k]) * (1 / s_w[n]).
//
// S8Matrix holds q_w packed once for the kernels: rows padded to a multiple of 32 (zero rows,
// scale 1), columns to a multiple of 64 (zeros), and for each block of 16 rows
// [cols_pad / 4][16 rows][4 columns] bytes: one 64-byte line per 4 columns, which is both the
// VNNI operand (16 rows x 4 products per lane) and an AMX B tile (16 such lines).
#pragma once

#include <cstdint>
#include <vector>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

struct S8Matrix {
    int64_t rows = 0, cols = 0;           // the real shape [rows, cols]
    int64_t rows_pad = 0, cols_pad = 0;   // rows_pad % 32 == 0, cols_pad % 64 == 0
    std::vector<int8_t> packed;           // rows_pad * cols_pad bytes, layout above
    std::vector<float> scale;             // rows_pad: s_w (1 for padding rows)
    std::vector<int32_t> comp;            // rows_pad: -128 * sum_k q_w[n, k]
};

// One row's rule (above): q [n] from x [n]; returns the scale s = 127 / amax (1 when amax is
// 0). Scalar, the reference the kernels are tested against.
float quantize_row_s8(const float* x, int64_t n, int8_t* q);

// W [rows, cols] float32 -> S8Matrix, each row by quantize_row_s8. Throws ShapeError for a
// non-positive size.
S8Matrix quantize_s8(const float* w, int64_t rows, int64_t cols);
// Rows already quantized (q [rows, cols], scale [rows], as a CTranslate2 int8 model stores
// them): packed as given. Throws ShapeError for a non-positive size or a scale that is not
// positive and finite.
S8Matrix pack_s8(const int8_t* q, const float* scale, int64_t rows, int64_t cols);

// Row `row` of q_w [cols], and its float value float(q) * (1 / s) (the embedding lookup).
void s8_row(const S8Matrix& w, int64_t row, int8_t* out);
void s8_dequantize_row(const S8Matrix& w, int64_t row, float* out);

// Working memory of linear_s8, grown to the largest call.
struct S8Scratch {
    std::vector<uint8_t> x;       // u [n_pad, cols_pad]
    std::vector<float> inv;       // 1 / s_x per row
};

// y [n, rows] = the product above of x [n, cols] (row strides cols and rows); bias: rows
// floats or nullptr. Throws ShapeError for n < 0.
void linear_s8(const S8Matrix& w, const float* bias, const float* x, int64_t n, float* y,
               ThreadPool& pool, S8Scratch& scratch);

// The activation rule alone, for tests: u [n, cols] and inv [n] (1 / s_x) of x [n, cols].
void quantize_activations_u8(const float* x, int64_t n, int64_t cols, uint8_t* u, float* inv);

// Which kernel linear_s8 runs for n rows here: "amx", "avx512" (VNNI), "avx2" or "generic".
const char* linear_s8_kernel(int64_t n);

namespace s8_kernels {
// Tokens per AMX task: two 16-row tiles.
constexpr int64_t kAmxTokens = 32;
// Below this many rows the AMX tiles (32 tokens each) would mostly multiply padding.
constexpr int64_t kAmxMinRows = 32;

struct Kernels {
    // u rows [t0, t1) of x (row stride cols) into u (row stride cols_pad; columns from cols
    // on zero), 1 / s_x into inv.
    void (*quantize_rows)(const float* x, int64_t t0, int64_t t1, int64_t cols,
                          int64_t cols_pad, uint8_t* u, float* inv);
    // y rows [t0, t1) x weight blocks of 16 rows [b0, b1) (b0, b1 even) of the product,
    // dequantized, bias added; y row stride ldy (= w.rows: the padding rows are not written).
    void (*gemm)(const uint8_t* u, const float* inv, int64_t t0, int64_t t1, const S8Matrix& w,
                 int64_t b0, int64_t b1, const float* bias, float* y, int64_t ldy);
};
const Kernels* avx512();   // nullptr when not built
const Kernels* avx2();     // nullptr when not built
// gemm only (quantize_rows nullptr), for t0 a multiple of kAmxTokens and t1 - t0 <= kAmxTokens:
// it reads kAmxTokens rows of u from t0 (linear_s8 pads u with zero rows). nullptr when not built.
const Kernels* amx();
}  // namespace s8_kernels

}  // namespace dasllama::nn
