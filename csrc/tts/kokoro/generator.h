// The iSTFTNet generator (reference: ReferenceKokoro.generator): the decoder's output x
// [512, 2F] and the F0 curve [2F] -> audio [600 F] at 24 kHz.
//
//   har = STFT(harmonic source(F0))                                   [22, 120F + 1]
//   for each upsampling stage i:
//       x = ups_i(LeakyReLU_0.1(x))          (transposed convolutions x10, x6)
//       x = ReflectionPad1d((1, 0))(x)       after the last one
//       x = x + noise_res_i(noise_convs_i(har))
//       x = mean over the stage's resblocks of resblock(x)
//   x = conv_post(LeakyReLU_0.01(x));  audio = iSTFT(exp(x[:11]), sin(x[11:]))
//
// Snake AdaIN residual blocks: snake_resblock.h; the noise convolutions: weight_ops.h (int8 or
// float by the file); the float
// transposed convolutions, conv_post, STFT and iSTFT: csrc/nn.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "nn/conv1d.h"
#include "nn/conv_transpose1d.h"
#include "nn/stft.h"
#include "tts/kokoro/harmonic_source.h"
#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/snake_resblock.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

constexpr float kUpsampleSlope = 0.1f;   // LeakyReLU before each transposed convolution
constexpr float kPostSlope = 0.01f;      // before conv_post (PyTorch's default slope)

class Generator {
public:
    Generator() = default;
    Generator(Generator&&) = default;
    Generator& operator=(Generator&&) = default;
    // decoder.generator.* and the kokoro.* settings of the source and the STFT.
    static Generator load(const KokoroWeights& w);

    const HarmonicSource& source() const { return source_; }
    const nn::NaiveStft& stft() const { return stft_; }
    int64_t in_channels() const { return in_channels_; }
    int64_t bins() const { return stft_.bins(); }
    // Audio samples for a decoder output of `curve` (= 2F) columns.
    int64_t samples(int64_t curve) const;
    // har: the source's STFT [2 bins, source frames] for an F0 curve of `curve` values.
    void source_spectrum(const float* f0, int64_t curve, std::vector<float>& har,
                         ThreadPool& pool, const SourceNoise& noise = {}) const;
    int64_t spectrum_frames(int64_t curve) const;

    // The graph's inverse STFT alone: mag, phase [bins, frames] -> audio (resized).
    void istft(const float* mag, const float* phase, int64_t frames, std::vector<float>& audio,
               ThreadPool& pool);

    // x [in_channels, curve] with the F0 curve [curve] -> audio [samples(curve)] (resized).
    // har: the source spectrum to use instead of the generator's own (a peer's, to compare
    // from the same point); nullptr computes it.
    void forward(const float* x, int64_t curve, const float* style, const float* f0,
                 std::vector<float>& audio, ThreadPool& pool, const float* har = nullptr,
                 const SourceNoise& noise = {});

private:
    struct Stage;
    // x_ [C, l] -> x_ = the mean of the stage's resblocks of x_.
    void average_resblocks(Stage& s, int64_t l, const float* style, ThreadPool& pool);

    struct Stage {
        nn::ConvTranspose1d up;
        Conv noise_conv;
        SnakeResBlock noise_res;
        std::vector<SnakeResBlock> resblocks;
    };
    HarmonicSource source_;
    nn::NaiveStft stft_;
    nn::BasisIstft istft_;
    std::vector<Stage> stages_;
    nn::Conv1d post_;
    int64_t in_channels_ = 0;
    SnakeResBlock::Scratch scratch_;
    std::vector<SnakeResBlock::Scratch> block_scratch_;
    std::vector<std::vector<float>> block_out_;
    std::vector<std::unique_ptr<ThreadPool>> solo_;   // one-thread pools, one per share
    std::vector<float> har_, x_, y_, src_, t_, post_out_, mag_, phase_;
};

}  // namespace dasllama::kokoro
