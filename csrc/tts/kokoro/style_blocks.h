// The style-conditioned blocks of StyleTTS2's predictor and decoder (reference: ReferenceKokoro's
// ada_in, ada_layer_norm and adain_resblock):
//
// - AdaIN1d: (1 + gamma) * InstanceNorm(x) + beta over x [C, L], gamma and beta = fc(style).
// - AdaLayerNorm: (1 + gamma) * LayerNorm(x) + beta over x [T, C] (channels last).
// - AdainResBlk1d: residual norm1 -> LeakyReLU 0.2 -> [pool: depthwise x2 transposed conv] ->
//   conv1 -> norm2 -> LeakyReLU 0.2 -> conv2; shortcut [nearest x2] [-> conv1x1];
//   (residual + shortcut) / sqrt(2).
// fc is a linear over the one style row (the int8 lane quantizes it alone) and the
// convolutions are weight_ops.h's, each in its tensor's lane; the pool is a float convolution
// (nn/conv_transpose1d.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
namespace nn {
class ConvTranspose1d;
}
}  // namespace dasllama

namespace dasllama::kokoro {

constexpr float kBlockSlope = 0.2f;    // the residual blocks' and text encoder's LeakyReLU
constexpr float kAdaInEps = 1e-5f;     // InstanceNorm's epsilon inside AdaIN

// fc(style) of the last style row a block saw: every call of a chunk passes the same row, so
// the product runs once per chunk (the row compared bit for bit). Not thread-safe, as the
// blocks' forward is not.
class StyleFcCache {
public:
    const std::vector<float>& get(const Linear& fc, const float* style) const;

private:
    mutable std::vector<float> style_, h_;
};

class AdaIN1d {
public:
    AdaIN1d() = default;
    // MODULE.fc.*
    static AdaIN1d load(const KokoroWeights& w, const std::string& module);
    int64_t channels() const { return fc_.out() / 2; }
    int64_t style_width() const { return fc_.in(); }
    // x [C, L] -> out [C, L] (out may equal x).
    void forward(const float* x, int64_t l, const float* style, float* out,
                 ThreadPool* pool) const;
    // out = Snake(AdaIN(x)) with per-channel alpha [C] (nn/snake.h), and range = out's
    // quantization range (for the int8 convolution that reads it): the same bits as forward,
    // nn::snake and a range pass, in one pass per row where the CPU has the fused kernel.
    void forward_snake(const float* x, int64_t l, const float* style, const float* alpha,
                       float* out, QuantRange& range, ThreadPool* pool) const;

private:
    Linear fc_;
    StyleFcCache cache_;
};

class AdaLayerNorm {
public:
    AdaLayerNorm() = default;
    // MODULE.fc.*, MODULE.weight, MODULE.bias, kokoro.eps.MODULE
    static AdaLayerNorm load(const KokoroWeights& w, const std::string& module);
    int64_t channels() const { return fc_.out() / 2; }
    // x [T, C] -> out [T, C] (out may equal x).
    void forward(const float* x, int64_t t, const float* style, float* out,
                 ThreadPool* pool) const;

private:
    Linear fc_;
    StyleFcCache cache_;
    const float* weight_ = nullptr;
    const float* bias_ = nullptr;
    float eps_ = 1e-5f;
};

class AdainResBlk1d {
public:
    AdainResBlk1d();
    ~AdainResBlk1d();
    AdainResBlk1d(AdainResBlk1d&&) noexcept;
    AdainResBlk1d& operator=(AdainResBlk1d&&) noexcept;
    // MODULE.{norm1, conv1, norm2, conv2}[, .pool][, .conv1x1]
    static AdainResBlk1d load(const KokoroWeights& w, const std::string& module);

    int64_t c_in() const { return conv1_.c_in(); }
    int64_t c_out() const { return conv2_.c_out(); }
    bool upsamples() const { return upsample_; }
    int64_t out_length(int64_t l) const { return upsample_ ? 2 * l : l; }
    // x [C_in, L] -> out [C_out, out_length(L)] (resized).
    void forward(const std::vector<float>& x, int64_t l, const float* style,
                 std::vector<float>& out, ThreadPool* pool) const;

private:
    std::string name_;
    AdaIN1d norm1_, norm2_;
    Conv conv1_, conv2_, conv1x1_;
    bool upsample_ = false, shortcut_conv_ = false;
    // The depthwise x2 transposed convolution, without its bias (pool_bias_, added after the
    // taps as the reference adds it). Its scratch is mutable: forward is not reentrant.
    std::unique_ptr<nn::ConvTranspose1d> pool_;
    const float* pool_bias_ = nullptr;
};

}  // namespace dasllama::kokoro
