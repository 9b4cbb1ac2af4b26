#include "nn/linear.h"

#include "core/formats.h"
#include "cpu/ops.h"

namespace dasllama::nn {

void linear(const Linear& l, const float* x, int64_t n, float* y, ThreadPool& pool,
            cpu::Precision precision) {
    if (l.s8) {
        thread_local S8Scratch scratch;   // the calling thread's 8-bit activations
        linear_s8(*l.s8, l.bias.empty() ? nullptr : l.bias.data(), x, n, y, pool, scratch);
        return;
    }
    if (l.bf16 && n >= kBf16MinRows) {
        thread_local Bf16GemmScratch scratch;   // the calling thread's rounded activations
        gemm_bf16(*l.bf16, x, n, y, pool, scratch);
    } else {
        cpu::matmul(l.w, x, n, y, pool, precision);
    }
    if (!l.bias.empty()) cpu::add_rows(y, nullptr, l.bias.data(), n, l.w.rows);
}

cpu::WeightMatrix f32_matrix(const float* data, int64_t rows, int64_t cols) {
    static const TypeTraits* f32 = type_traits(uint32_t(GgmlType::F32));
    return cpu::prepare_weight(*f32, rows, cols, reinterpret_cast<const uint8_t*>(data), nullptr);
}

}  // namespace dasllama::nn
