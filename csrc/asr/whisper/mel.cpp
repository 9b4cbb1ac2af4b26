#include "asr/whisper/mel.h"

#include <algorithm>
#include <string>

#include "core/errors.h"

namespace dasllama::whisper {

MelFrontEnd::MelFrontEnd(const WhisperWeights& w)
    : w_(w), hop_(w.cfg.hop_length), stft_(w.cfg.n_fft, w.cfg.hop_length) {}

void MelFrontEnd::compute(const float* audio, int64_t n, std::vector<float>& mel,
                          ThreadPool& pool) {
    if (n < 0) throw ShapeError("whisper mel: negative sample count " + std::to_string(n));
    const int64_t n_mels = w_.cfg.n_mels;
    padded_.assign(size_t(n + hop_), 0.0f);
    std::copy(audio, audio + n, padded_.begin());
    stft_.compute(padded_.data(), n + hop_, power_, pool);
    const int64_t frames = n_frames(n);   // the spectrum's last frame is dropped
    nn::mel_log10(w_.mel_filters, power_.data(), frames, kPowerFloor, logmel_, pool);
    const float top = *std::max_element(logmel_.begin(), logmel_.end());
    mel.resize(size_t(n_mels * frames));
    for (int64_t f = 0; f < frames; ++f)
        for (int64_t m = 0; m < n_mels; ++m) {
            const float v = std::max(logmel_[size_t(f * n_mels + m)], top - kDynamicRange);
            mel[size_t(m * frames + f)] = (v + 4.0f) / 4.0f;
        }
}

void cut_window(const float* mel, int64_t n_mels, int64_t total, int64_t seek, int64_t size,
                int64_t window, std::vector<float>& out) {
    if (seek < 0 || size < 0 || size > window || seek + size > total)
        throw ShapeError("whisper window: frames [" + std::to_string(seek) + ", " +
                         std::to_string(seek + size) + ") of a clip of " +
                         std::to_string(total) + " frames, window " + std::to_string(window));
    out.assign(size_t(n_mels * window), 0.0f);
    for (int64_t m = 0; m < n_mels; ++m)
        std::copy(mel + m * total + seek, mel + m * total + seek + size,
                  out.begin() + m * window);
}

}  // namespace dasllama::whisper
