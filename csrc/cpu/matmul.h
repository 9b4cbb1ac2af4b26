// Matrix products of GGUF weights with float32 activations: the hot loop of every model.
//
// A weight matrix W has `rows` output features, each a row of `cols` inputs stored in its GGUF
// type (NumPy shape (rows, cols); GGUF ne = {cols, rows}). matmul computes
//     Y[t, r] = sum_c W[r, c] * X[t, c]     for t < n_tokens, r < rows
// X is n_tokens x cols float32 (row stride cols), Y is n_tokens x rows float32 (row stride rows).
// n_tokens == 1 is decode (matrix-vector); larger is prefill (matrix-matrix).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/formats.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::cpu {

// A weight matrix ready for the kernels: either a view of the mapped file (no copy) or a
// repacked copy in a layout the kernels prefer. Which one is the kernel family's choice.
struct WeightMatrix {
    const TypeTraits* type = nullptr;   // the stored type (after any repack)
    int64_t rows = 0, cols = 0;
    const uint8_t* data = nullptr;      // row r starts at data + r * row_bytes
    int64_t row_bytes = 0;
    std::shared_ptr<const void> owner;  // holds repacked memory (or the mapping) alive
};

// Wraps (and possibly repacks) rows x cols values of `type` at `data`. `keep_alive` holds the
// mapping. Throws FormatError for a type the kernels cannot multiply.
WeightMatrix prepare_weight(const TypeTraits& type, int64_t rows, int64_t cols,
                            const uint8_t* data, std::shared_ptr<const void> keep_alive);

// Y = X W^T as above, split over the pool's threads.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Row r of W as float32 (embedding lookup).
void get_row(const WeightMatrix& w, int64_t r, float* out);

}  // namespace dasllama::cpu
