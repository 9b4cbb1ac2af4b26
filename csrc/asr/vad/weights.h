// Silero VAD v6's 16 kHz weights, read from the GGUF that dasllama.convert.silero_vad writes
// (its module text lists the tensors): the STFT basis, four encoder convolutions, the LSTM
// cell (gate order i, f, g, o) and the 1x1 output convolution. Every shape and the metadata
// (sample rate, window, context, STFT size) are checked at load; all values are float32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/conv1d.h"
#include "nn/lstm.h"

namespace dasllama::vad {

struct VadConfig {
    int64_t sample_rate = 16000;
    int64_t window = 512;    // samples per probability
    int64_t context = 64;    // samples of the previous window seen before each window
    int64_t n_fft = 256;     // STFT frame
    int64_t hop = 128;       // STFT hop
    int64_t hidden = 128;    // LSTM width

    int64_t n_bins() const { return n_fft / 2 + 1; }
    int64_t input() const { return context + window; }   // samples one step reads
};

struct VadWeights {
    VadConfig cfg;
    nn::Conv1d stft;         // [2 * n_bins, 1, n_fft], stride hop: real rows, then imaginary
    nn::Conv1d enc[4];       // 129->128 s1, 128->64 s2, 64->64 s2, 64->128 s1; kernel 3, pad 1
    nn::Lstm lstm;           // 128 -> hidden
    std::vector<float> out_w;   // [hidden]
    float out_b = 0.0f;
};

// Throws GGUFError / ShapeError / FormatError naming the file and the key or tensor at fault.
std::unique_ptr<VadWeights> load_vad_weights(const std::string& path);

}  // namespace dasllama::vad
