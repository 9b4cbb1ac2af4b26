// iSTFTNet's AdaINResBlock1 (reference: ReferenceKokoro.snake_resblock): three rounds of
//     t = conv2_j(snake2_j(adain2_j(conv1_j(snake1_j(adain1_j(x))))));  x = t + x
// over channel-major x [C, L]; conv1_j is dilated (1, 3, 5), both keep the length. Snake's
// alphas are per channel (MODULE.alphaK.J, [1, C, 1]); AdaIN and the convolutions are
// style_blocks.h's and weight_ops.h's (either lane).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/style_blocks.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

class SnakeResBlock {
public:
    SnakeResBlock() = default;
    // MODULE.{adain1, adain2}.J, MODULE.{alpha1, alpha2}.J, MODULE.{convs1, convs2}.J for
    // J = 0, 1, ... while present (at least one round). ShapeError when the parts disagree.
    static SnakeResBlock load(const KokoroWeights& w, const std::string& module);

    int64_t channels() const { return channels_; }
    int64_t rounds() const { return int64_t(rounds_.size()); }
    // Multiply-adds per output column (channels^2 times the kernel taps of every conv): a
    // relative cost for sharing blocks among threads.
    int64_t cost() const;
    // x [C, l] -> out [C, l] (resized; out must not be x). scratch: the caller's buffers,
    // reused across calls.
    struct Scratch {
        std::vector<float> a, b;
    };
    void forward(const float* x, int64_t l, const float* style, std::vector<float>& out,
                 Scratch& scratch, ThreadPool& pool) const;

private:
    struct Round {
        AdaIN1d adain1, adain2;
        std::vector<float> alpha1, alpha2;
        Conv conv1, conv2;
    };
    std::string name_;
    int64_t channels_ = 0;
    std::vector<Round> rounds_;
};

}  // namespace dasllama::kokoro
