// Whisper's audio encoder on the CPU: conv1 (k 3, pad 1) + GELU, conv2 (k 3, stride 2,
// pad 1) + GELU, sinusoidal positions, pre-LN blocks of bidirectional self-attention
// (nn/attention_self.h) and a GELU MLP, a final LayerNorm. Float32 arithmetic, but for the
// int8 lane's linears (8-bit activations) and its attention (bfloat16 products on AMX). The
// float32 lane's products over the frames (convolutions, linears) take cpu::matmul_f32_blocked
// with their bias and GELU fused (blocks.h's frames_linear, nn::Conv1d::forward_gelu).
#pragma once

#include <cstdint>
#include <vector>

#include "asr/whisper/weights.h"
#include "nn/attention_self.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

class Encoder {
public:
    explicit Encoder(WhisperWeights& w) : w_(w) {}
    // window [n_mels, 2 * n_audio_ctx] -> out [n_audio_ctx, d] (resized).
    void run(const float* window, std::vector<float>& out, ThreadPool& pool);

private:
    WhisperWeights& w_;
    std::vector<float> in_, c1_, h_, qkv_, attn_, proj_, ff_;
    nn::SelfAttendScratch scratch_;
};

}  // namespace dasllama::whisper
