// A linear layer y = x W^T + bias over float32 rows: a GGUF weight matrix and its bias.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/matmul.h"
#include "nn/gemm_bf16.h"
#include "nn/linear_s8.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

struct Linear {
    cpu::WeightMatrix w;       // [out, in]
    std::vector<float> bias;   // out floats; empty: no bias
    // Set by a loader for a reduced-precision lane (nn/gemm_bf16.h): products of at least
    // kBf16MinRows rows then run in bfloat16 on AMX whatever `precision` says.
    std::shared_ptr<const Bf16Matrix> bf16;
    // Set by a loader for an int8 lane with per-row scales (nn/linear_s8.h): every product
    // then runs in 8-bit integers whatever `precision` says, and `w` is only kept for other
    // devices.
    std::shared_ptr<const S8Matrix> s8;
};

// Below this many rows a bfloat16 product is not worth rounding the activations for: decode
// steps keep the integer kernels.
constexpr int64_t kBf16MinRows = 64;

// y [n, out] = x [n, in] W^T + bias.
void linear(const Linear& l, const float* x, int64_t n, float* y, ThreadPool& pool,
            cpu::Precision precision = cpu::Precision::kF32);

// A float32 weight matrix over `rows` x `cols` floats that the caller keeps alive (no copy).
cpu::WeightMatrix f32_matrix(const float* data, int64_t rows, int64_t cols);

}  // namespace dasllama::nn
