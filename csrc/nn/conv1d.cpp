#include "nn/conv1d.h"

#include <algorithm>
#include <string>

#include "core/errors.h"
#include "cpu/matmul_f32_blocked.h"
#include "cpu/ops.h"
#include "nn/activations.h"
#include "nn/linear.h"

namespace dasllama::nn {

Conv1d::Conv1d(const std::vector<float>& weight, std::vector<float> bias, int64_t c_out,
               int64_t c_in, int64_t k, int64_t stride, int64_t pad)
    : c_out_(c_out), c_in_(c_in), k_(k), stride_(stride), pad_(pad), bias_(std::move(bias)) {
    if (c_out <= 0 || c_in <= 0 || k <= 0 || stride <= 0 || pad < 0 ||
        int64_t(weight.size()) != c_out * c_in * k ||
        (!bias_.empty() && int64_t(bias_.size()) != c_out))
        throw ShapeError("conv1d: weight of " + std::to_string(weight.size()) +
                         " values for [" + std::to_string(c_out) + ", " + std::to_string(c_in) +
                         ", " + std::to_string(k) + "], bias of " +
                         std::to_string(bias_.size()));
    // [C_out, C_in, K] -> [C_out, K, C_in]: a window of K time-major rows is K*C_in floats.
    packed_.resize(weight.size());
    for (int64_t o = 0; o < c_out; ++o)
        for (int64_t i = 0; i < c_in; ++i)
            for (int64_t j = 0; j < k; ++j)
                packed_[size_t((o * k + j) * c_in + i)] = weight[size_t((o * c_in + i) * k + j)];
    w_ = f32_matrix(packed_.data(), c_out, k * c_in);
}

int64_t Conv1d::pad_input(const float* in, int64_t T) {
    const int64_t n_out = out_length(T);
    if (T <= 0 || n_out <= 0)
        throw ShapeError("conv1d: " + std::to_string(T) + " input rows give no output rows");
    // Rows past the last window's end need not exist; pad so every window is in bounds.
    const int64_t rows = std::max(T + 2 * pad_, (n_out - 1) * stride_ + k_);
    padded_.assign(size_t(rows * c_in_), 0.0f);
    std::copy(in, in + T * c_in_, padded_.begin() + pad_ * c_in_);
    return n_out;
}

void Conv1d::forward(const float* in, int64_t T, std::vector<float>& out, ThreadPool& pool) {
    const int64_t n_out = pad_input(in, T);
    out.resize(size_t(n_out * c_out_));
    cpu::matmul_f32_strided(w_, padded_.data(), stride_ * c_in_, n_out, out.data(), pool);
    if (!bias_.empty()) cpu::add_rows(out.data(), nullptr, bias_.data(), n_out, c_out_);
}

void Conv1d::forward_gelu(const float* in, int64_t T, std::vector<float>& out,
                          ThreadPool& pool) {
    if (!cpu::matmul_f32_blocked_fast()) {
        forward(in, T, out, pool);
        gelu_erf(out.data(), int64_t(out.size()), pool);
        return;
    }
    const int64_t n_out = pad_input(in, T);
    out.resize(size_t(n_out * c_out_));
    cpu::matmul_f32_blocked(w_, padded_.data(), stride_ * c_in_, n_out, out.data(), c_out_, pool,
                            bias_.empty() ? nullptr : bias_.data(), cpu::F32Activation::kGeluErf);
}

}  // namespace dasllama::nn
