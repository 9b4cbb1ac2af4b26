// Silero VAD's decoder: the LSTM cell steps once per window on the encoder's row (its h and c
// are the stream's state), then ReLU(h), the 1x1 output convolution and a sigmoid give the
// window's speech probability. The state keeps h before the ReLU.
#pragma once

#include "asr/vad/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::vad {

// enc [128] -> probability; s updated.
float decode_step(const VadWeights& w, const float* enc, nn::LstmState& s, ThreadPool& pool);

}  // namespace dasllama::vad
