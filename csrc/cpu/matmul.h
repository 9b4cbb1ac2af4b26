// Matrix products of GGUF weights with float32 activations: the hot loop of every model.
//
// A weight matrix W has `rows` output features, each a row of `cols` inputs stored in its GGUF
// type (NumPy shape (rows, cols); GGUF ne = {cols, rows}). matmul computes
//     Y[t, r] = sum_c W[r, c] * X[t, c]     for t < n_tokens, r < rows
// X is n_tokens x cols float32 (row stride cols), Y is n_tokens x rows float32 (row stride rows).
// n_tokens == 1 is decode (matrix-vector); larger is prefill (matrix-matrix).
//
// Precision::kFast (the default) quantizes each token's activations to int8 in blocks of 32
// (16 for Q6_K) with one float scale per block, and multiplies them with the weights' integer
// levels exactly; only the activation rounding (0.5-1.2% rel-l2 against the float32 product
// on random normal data, tests/cpp/test_matmul.cpp) and the float summation order differ
// from the exact product. Types without an integer kernel
// (F32, F16, BF16, Q2_K, Q3_K, IQ4_NL, IQ4_XS) always take the float path.
// Precision::kF32 multiplies the weights, exactly as core/formats.h dequantizes them, with the
// unrounded float32 activations: for parity tests and models run in float32 (Pocket TTS).
// Rows are dequantized a few at a time into a per-thread buffer (Q8_0 against a few tokens:
// widened in registers instead) and multiplied in register tiles of rows x tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/formats.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::cpu {

enum class Precision {
    kFast,  // activations quantized to 8 bits per block, integer dot products
    kF32,   // activations stay float32; weight rows dequantized, float32 dot products
};

// A weight matrix ready for the kernels. `data` always views the rows in their GGUF type (the
// mapped file, no copy). Types with an integer kernel also get `packed`: the same values
// repacked at load into the kernels' layout (cpu/kernels_matmul.h), about the size of the
// original (K-quants grow by a third: their scales are expanded to float32).
struct WeightMatrix {
    const TypeTraits* type = nullptr;   // the GGUF type of `data`
    int64_t rows = 0, cols = 0;
    const uint8_t* data = nullptr;      // row r starts at data + r * row_bytes
    int64_t row_bytes = 0;
    int packed_kind = -1;               // the packed layout (kernels_matmul.h); -1: none
    const uint8_t* packed = nullptr;    // row r starts at packed + r * packed_row_bytes
    int64_t packed_row_bytes = 0;
    std::shared_ptr<const void> owner;  // holds the packed copy and the mapping alive
};

// Wraps (and, for types with an integer kernel, repacks) rows x cols values of `type` at
// `data`. `keep_alive` holds the mapping. Throws FormatError for a type the kernels cannot
// multiply (no dequantizer) or cols not a multiple of its block size, ShapeError for negative
// sizes. When the matrix is repacked, `consumed(p, n)` (if given) is called for each stretch of
// source bytes already copied, so a caller can let those pages go while the rest is packed.
using ConsumedFn = std::function<void(const uint8_t* p, uint64_t n)>;
WeightMatrix prepare_weight(const TypeTraits& type, int64_t rows, int64_t cols,
                            const uint8_t* data, std::shared_ptr<const void> keep_alive,
                            const ConsumedFn& consumed = {});

// Y = X W^T as above, split over the pool's threads. n_tokens >= 0 (0 does nothing).
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            Precision precision = Precision::kFast);

// matmul on the float path (Precision::kF32) with activation rows `ldx` floats apart. ldx may
// be less than cols: rows may overlap, as the sliding windows of a convolution over time-major
// rows do (window t = rows t..t+k-1 of the signal = ldx * t floats on).
void matmul_f32_strided(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                        float* y, ThreadPool& pool);

// Several products of the same activations, Y_i = X W_i^T (all W_i with x's cols), as one
// job on the pool: a decode step's q/k/v or gate/up projections are each too small to be
// worth a pool round of their own. Same results as separate matmul calls.
struct MatmulTarget {
    const WeightMatrix* w;
    float* y;
};
void matmul_shared_input(const MatmulTarget* targets, int n_targets, const float* x,
                         int64_t n_tokens, ThreadPool& pool,
                         Precision precision = Precision::kFast);

// Row r of W as float32 (embedding lookup), equal to core/formats.h's dequantize of that
// row; read from the packed copy when there is one, so lookups never touch the file's pages.
// Throws ShapeError for r outside [0, rows).
void get_row(const WeightMatrix& w, int64_t r, float* out);

// --- variants, for tests and benchmarks ---------------------------------------------------------
// The kernel variants this process may run, best first, ending with "generic".
std::vector<std::string> matmul_variants();
// matmul with a named variant instead of the best one (throws Error when not available).
void matmul_with(std::string_view variant, const WeightMatrix& w, const float* x,
                 int64_t n_tokens, float* y, ThreadPool& pool,
                 Precision precision = Precision::kFast);

// The activation rounding kFast applies for w's type: x (n_tokens x cols) replaced by the
// values its int8 blocks stand for (scale * level), so a test can form the exact product the
// integer kernels compute. A copy of x for types that take the float path.
std::vector<float> quantized_activations(const WeightMatrix& w, const float* x,
                                         int64_t n_tokens);

}  // namespace dasllama::cpu
