// StyleTTS2's decoder in front of the iSTFTNet generator (reference: ReferenceKokoro.decoder):
// F0 and N (2F each) brought to the frame rate by stride-2 convolutions; the aligned text
// features asr [512, F] with them through the encode block; then the decode blocks, each fed
// again with [x; asr_res(asr); F0; N] along channels (the last upsamples x2). Out: [C, 2F].
#pragma once

#include <cstdint>
#include <vector>

#include "tts/kokoro/weight_ops.h"
#include "tts/kokoro/style_blocks.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

class Decoder {
public:
    Decoder() = default;
    // decoder.{F0_conv, N_conv, encode, asr_res.0, decode.I}
    static Decoder load(const KokoroWeights& w);

    int64_t asr_channels() const { return asr_channels_; }
    int64_t out_channels() const { return out_channels_; }
    // asr [asr_channels, frames], f0 and n [2 frames], style [style_decoder] ->
    // out [out_channels, out_length] (resized); returns out_length (2 frames).
    int64_t forward(const float* asr, int64_t frames, const float* f0, const float* n,
                    const float* style, std::vector<float>& out, ThreadPool& pool) const;

private:
    Conv f0_conv_, n_conv_, asr_res_;
    AdainResBlk1d encode_;
    std::vector<AdainResBlk1d> decode_;
    int64_t asr_channels_ = 0, out_channels_ = 0;
};

}  // namespace dasllama::kokoro
