// Silero VAD v6 (16 kHz) on the CPU: one speech probability per window of 512 samples.
// The stages are stft.h, encoder.h and decoder.h; a VadStream holds what one audio stream
// carries from window to window (the last 64 samples, the LSTM's h and c), so many streams
// can share one model's weights.
//
// Thread-safety: a SileroVad may be shared by threads; a mutex serializes its windows (the
// stages keep scratch buffers). Each stream belongs to one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "asr/vad/encoder.h"
#include "asr/vad/stft.h"
#include "asr/vad/weights.h"
#include "core/thread_pool.h"

namespace dasllama::vad {

struct VadStream {
    std::vector<float> input;    // context + window: the samples of the next step
    nn::LstmState lstm;
    int64_t windows = 0;         // windows processed since the last reset
};

class SileroVad {
public:
    // n_threads <= 0: the physical cores (one is plenty: a window is about 0.7 M multiply-adds).
    SileroVad(const std::string& path, int n_threads = 1);

    const VadConfig& config() const { return w_->cfg; }
    VadStream new_stream() const;
    void reset(VadStream& s) const;   // zero context and state, as at the start of a clip

    // window [cfg.window] samples -> that window's probability; s advanced.
    float process(const float* window, VadStream& s);
    // n samples, a multiple of cfg.window, -> n / window probabilities into out; s advanced.
    void process(const float* samples, int64_t n, VadStream& s, float* out);
    // A whole clip from a fresh state: the last partial window is padded with zeros
    // (silero-vad's get_speech_timestamps); out gets ceil(n / window) values.
    std::vector<float> probabilities(const float* audio, int64_t n);

private:
    float step_locked(const float* window, VadStream& s);

    std::unique_ptr<VadWeights> w_;
    ThreadPool pool_;
    std::mutex mu_;
    StftFrontEnd stft_;
    Encoder encoder_;
    std::vector<float> mag_, enc_;
};

}  // namespace dasllama::vad
