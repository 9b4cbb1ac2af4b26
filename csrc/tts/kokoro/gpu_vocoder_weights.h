// The device copy of Kokoro's decoder and generator weights (gpu_vocoder.h): int8 convolutions
// and style projections dequantized to float32 once, (q - zero point) * scale, the float
// tensors as they are. Module names are the converter's (weights.h), read as the CPU chain
// reads them (decoder.cpp, generator.cpp, style_blocks.cpp, snake_resblock.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/conv.h"
#include "gpu/device.h"
#include "tts/kokoro/gpu_admission.h"
#include "tts/kokoro/weights.h"

namespace dasllama::kokoro {

// A convolution (plain or transposed) on the device: weight in torch's layout, optional bias,
// and for the dense ones the seat runs on cooperative matrices their float16 panel.
struct DevConv {
    std::unique_ptr<gpu::Buffer> w, b;
    gpu::ConvPanel panel;
    int64_t c_in = 0, c_out = 0, k = 0;
    ConvAttrs a;
    int64_t out_length(int64_t n) const;      // a plain convolution's
    int64_t tr_out_length(int64_t n) const;   // a transposed one's
};

// AdaIN1d: the style projection fc [S, 2C] (input-major) and its bias [2C].
struct DevAdain {
    std::unique_ptr<gpu::Buffer> w, b;
    int64_t channels = 0, style = 0;
};

struct DevAdainResBlk {
    DevAdain norm1, norm2;
    DevConv conv1, conv2, conv1x1, pool;   // pool: the depthwise x2 transposed convolution
    bool upsample = false, shortcut_conv = false;
    int64_t c_in() const { return conv1.c_in; }
    int64_t c_out() const { return conv2.c_out; }
};

struct DevSnakeRound {
    DevAdain adain1, adain2;
    std::unique_ptr<gpu::Buffer> alpha1, alpha2;
    DevConv conv1, conv2;
};

struct DevSnakeBlock {
    std::vector<DevSnakeRound> rounds;
    int64_t channels = 0;
};

struct DevStage {
    DevConv up, noise_conv;
    DevSnakeBlock noise_res;
    std::vector<DevSnakeBlock> resblocks;
};

struct DevVocoder {
    // decoder
    DevConv f0_conv, n_conv, asr_res;
    DevAdainResBlk encode;
    std::vector<DevAdainResBlk> decode;
    int64_t asr_channels = 0;
    // generator
    std::vector<DevStage> stages;
    DevConv post;
    std::unique_ptr<gpu::Buffer> merge_w, window, twiddles, basis, window_sum;
    int64_t harmonics = 0, upsample = 0, sample_rate = 0, n_fft = 0, hop = 0, bins = 0,
            window_sum_len = 0;
    float sine_amp = 0, voiced_threshold = 0, merge_bias = 0;
    int64_t style_width = 0;
    VocoderGpuDims dims;
};

// "" when the weights are ones the seat's kernels cover, else what is not.
std::string vocoder_weights_unfit(const KokoroWeights& w);
// Uploads the weights (bytes counts what went up). Throws DeviceError when memory runs out.
DevVocoder upload_vocoder(gpu::Device& dev, const KokoroWeights& w, uint64_t& bytes);

}  // namespace dasllama::kokoro
