// A float32 1-D transposed convolution (torch.nn.ConvTranspose1d / ONNX ConvTranspose) over a
// whole signal held channel-major, [C_in, N] (the layout of the StyleTTS2 decoders, whose
// instance norms run along time).
//
// Output length: stride * (N - 1) + dilation * (K - 1) + 1 + output_padding - pad_l - pad_r.
// Input position n scatters into output position stride * n + dilation * t - pad_l for tap t:
//     y[o, stride n + dilation t - pad_l] += w[i, o - g * C_out/groups, t] x[i, n]
// for the input channels i of o's group g. Grouped and dense convolutions are one float32
// matmul per group (the input transposed to time-major rows against the weight repacked to
// [C_out/groups * K, C_in/groups], through cpu/matmul's float path) followed by an overlap-add
// of the K taps of every input position; depthwise ones (one input channel per group) are a
// direct loop, which is all they need.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

struct ConvTransposeAttrs {
    int64_t stride = 1, pad_left = 0, pad_right = 0, dilation = 1, groups = 1,
            output_padding = 0;
};

class ConvTranspose1d {
public:
    ConvTranspose1d() = default;
    // weight: [C_in, C_out / groups, K] float32 (torch's and ONNX's layout); bias: C_out floats
    // or empty. Throws ShapeError naming the bad size or attribute.
    ConvTranspose1d(const float* weight, int64_t c_in, int64_t c_out, int64_t k,
                    std::vector<float> bias, const ConvTransposeAttrs& attrs);
    ConvTranspose1d(const ConvTranspose1d&) = delete;   // w_ views packed_'s heap buffer
    ConvTranspose1d& operator=(const ConvTranspose1d&) = delete;
    ConvTranspose1d(ConvTranspose1d&&) = default;
    ConvTranspose1d& operator=(ConvTranspose1d&&) = default;

    int64_t out_length(int64_t n) const;
    // in [C_in, n] -> out [C_out, out_length(n)] (resized). Throws ShapeError when n gives no
    // output.
    void forward(const float* in, int64_t n, std::vector<float>& out, ThreadPool& pool);
    // The same into a caller's buffer of C_out * out_length(n) floats.
    void forward(const float* in, int64_t n, float* out, ThreadPool& pool);

    int64_t c_in() const { return c_in_; }
    int64_t c_out() const { return c_out_; }
    int64_t kernel() const { return k_; }
    const ConvTransposeAttrs& attrs() const { return a_; }

private:
    void forward_direct(const float* in, int64_t n, float* out, ThreadPool& pool) const;
    void forward_matmul(const float* in, int64_t n, float* out, ThreadPool& pool);

    int64_t c_in_ = 0, c_out_ = 0, k_ = 0;
    ConvTransposeAttrs a_;
    std::vector<float> weight_;   // the original layout (direct path)
    std::vector<float> packed_;   // per group [C_out/groups * K, C_in/groups] (matmul path)
    std::vector<float> bias_;
    std::vector<cpu::WeightMatrix> w_;   // one per group, viewing packed_
    std::vector<float> xt_, z_;          // scratch: transposed input, per-tap products
};

}  // namespace dasllama::nn
