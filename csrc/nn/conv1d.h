// A 1-D convolution over a whole signal of time-major rows [T, C_in] with zero padding on both
// sides (torch.nn.Conv1d with padding=pad): Whisper's encoder stem. Output row t is the window
// of rows t*stride - pad .. t*stride - pad + K - 1 times the weight repacked to [C_out, K*C_in],
// one float32 matmul whose activation rows overlap (cpu::matmul_f32_strided): no im2col copy.
// (Pocket TTS's streaming, causal convolutions keep their own history: tts/pocket/conv.h.)
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

class Conv1d {
public:
    Conv1d() = default;
    // weight: torch's [C_out, C_in, K] float32; bias: C_out floats (empty: none).
    Conv1d(const std::vector<float>& weight, std::vector<float> bias, int64_t c_out,
           int64_t c_in, int64_t k, int64_t stride, int64_t pad);
    Conv1d(const Conv1d&) = delete;             // w_ views packed_'s heap buffer
    Conv1d& operator=(const Conv1d&) = delete;
    Conv1d(Conv1d&&) = default;
    Conv1d& operator=(Conv1d&&) = default;

    int64_t out_length(int64_t T) const { return (T + 2 * pad_ - k_) / stride_ + 1; }
    // in [T, C_in] -> out [out_length(T), C_out] (resized).
    void forward(const float* in, int64_t T, std::vector<float>& out, ThreadPool& pool);
    // forward, then the erf GELU of every output: where the CPU has cpu::matmul_f32_blocked's
    // vector kernel, as that product with the bias and GELU applied as the outputs are stored
    // (its summation order, not forward's); otherwise forward and nn::gelu_erf.
    void forward_gelu(const float* in, int64_t T, std::vector<float>& out, ThreadPool& pool);
    int64_t c_in() const { return c_in_; }
    int64_t c_out() const { return c_out_; }

private:
    int64_t c_out_ = 0, c_in_ = 0, k_ = 0, stride_ = 1, pad_ = 0;
    // The zero-padded input rows every window reads in bounds (resized); the output's length.
    int64_t pad_input(const float* in, int64_t T);
    std::vector<float> packed_, bias_, padded_;
    cpu::WeightMatrix w_;
};

}  // namespace dasllama::nn
