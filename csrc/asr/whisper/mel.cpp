#include "asr/whisper/mel.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/errors.h"

namespace dasllama::whisper {

MelFrontEnd::MelFrontEnd(const WhisperWeights& w)
    : w_(w), hop_(w.cfg.hop_length), stft_(w.cfg.n_fft, w.cfg.hop_length) {}

void MelFrontEnd::compute(const float* audio, int64_t n, std::vector<float>& mel,
                          ThreadPool& pool) {
    if (n < 0) throw ShapeError("whisper mel: negative sample count " + std::to_string(n));
    const int64_t n_mels = w_.cfg.n_mels;
    const int64_t frames = n_frames(n);   // the spectrum's last frame is dropped
    mel.resize(size_t(n_mels * frames));
    // Stretch by stretch (the clip with one hop of zeros appended), the log-mel written
    // straight into its place: the working buffers stay the size of one stretch however long
    // the clip is.
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t f0 = 0; f0 < frames; f0 += kChunkFrames) {
        const int64_t nf = std::min(kChunkFrames, frames - f0);
        raw_frames(audio, 0, n, n, f0, nf, stretch_, pool);
        for (int64_t m = 0; m < n_mels; ++m) {
            const float* row = stretch_.data() + m * nf;
            for (int64_t f = 0; f < nf; ++f) top = std::max(top, row[f]);
            std::copy(row, row + nf, mel.begin() + m * frames + f0);
        }
    }
    finish(mel.data(), int64_t(mel.size()), top);
}

void MelFrontEnd::raw_frames(const float* span, int64_t offset, int64_t avail, int64_t n,
                             int64_t f0, int64_t nf, std::vector<float>& out, ThreadPool& pool) {
    if (n < 0) throw ShapeError("whisper mel: negative sample count " + std::to_string(n));
    const int64_t n_mels = w_.cfg.n_mels;
    if (f0 < 0 || nf <= 0 || f0 + nf > n_frames(n))
        throw ShapeError("whisper mel: frames [" + std::to_string(f0) + ", " +
                         std::to_string(f0 + nf) + ") of a clip of " +
                         std::to_string(n_frames(n)) + " frames");
    stft_.compute_frames(span, offset, avail, n, hop_, f0, nf, power_, pool);
    nn::mel_log10(w_.mel_filters, power_.data(), nf, kPowerFloor, logmel_, pool);
    out.resize(size_t(n_mels * nf));
    for (int64_t f = 0; f < nf; ++f)
        for (int64_t m = 0; m < n_mels; ++m)
            out[size_t(m * nf + f)] = logmel_[size_t(f * n_mels + m)];
}

void MelFrontEnd::finish(float* v, int64_t count, float top) {
    const float low = top - kDynamicRange;
    for (int64_t i = 0; i < count; ++i) v[i] = (std::max(v[i], low) + 4.0f) / 4.0f;
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
