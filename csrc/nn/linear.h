// A linear layer y = x W^T + bias over float32 rows: a GGUF weight matrix and its bias.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

struct Linear {
    cpu::WeightMatrix w;       // [out, in]
    std::vector<float> bias;   // out floats; empty: no bias
};

// y [n, out] = x [n, in] W^T + bias.
void linear(const Linear& l, const float* x, int64_t n, float* y, ThreadPool& pool,
            cpu::Precision precision = cpu::Precision::kF32);

// A float32 weight matrix over `rows` x `cols` floats that the caller keeps alive (no copy).
cpu::WeightMatrix f32_matrix(const float* data, int64_t rows, int64_t cols);

}  // namespace dasllama::nn
