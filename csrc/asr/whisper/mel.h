// Whisper's log-mel front end, as faster-whisper computes it: the clip with one hop of zeros
// appended, centered power spectra (n_fft 400, hop 160, periodic Hann: nn/log_mel.h), all
// frames but the last through the file's mel filterbank, log10 (floor 1e-10), clamped to the
// clip's maximum - 8, and mapped by (x + 4) / 4. A window is 2 * n_audio_ctx frames cut from
// it at a seek frame, zero padded.
#pragma once

#include <cstdint>
#include <vector>

#include "asr/whisper/weights.h"
#include "nn/log_mel.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::whisper {

// Log-mel values are clamped to (the clip's maximum - kDynamicRange): Whisper's 80 dB range.
constexpr float kDynamicRange = 8.0f;
constexpr float kPowerFloor = 1e-10f;   // log10 is taken of max(power, floor)
// Frames per stretch of the front end's working buffers (one 30 s window): a clip of hours
// needs only its output, not spectra of every frame at once.
constexpr int64_t kChunkFrames = 3000;

class MelFrontEnd {
public:
    explicit MelFrontEnd(const WhisperWeights& w);
    // Frames the clip of n samples gives: n / hop + 1.
    int64_t n_frames(int64_t n) const { return n / hop_ + 1; }
    // audio [n] -> mel [n_mels, n_frames(n)] (resized). Throws ShapeError for n < 0.
    void compute(const float* audio, int64_t n, std::vector<float>& mel, ThreadPool& pool);
    // Frames [f0, f0 + nf) of compute()'s mel of a clip of n samples, before the clamp (the
    // log10 values), from the samples [offset, offset + avail) at span: out [n_mels, nf]
    // (resized). compute() makes its frames in stretches of kChunkFrames; the same stretches
    // taken here give the same values. Throws ShapeError for frames outside the clip or
    // samples outside the span.
    void raw_frames(const float* span, int64_t offset, int64_t avail, int64_t n, int64_t f0,
                    int64_t nf, std::vector<float>& out, ThreadPool& pool);
    // Raw values v [count] -> compute()'s: clamped to top - kDynamicRange, mapped by (x + 4) / 4.
    static void finish(float* v, int64_t count, float top);

private:
    const WhisperWeights& w_;
    int64_t hop_;
    nn::PowerSpectrum stft_;
    std::vector<float> power_, logmel_, stretch_;   // one stretch each
};

// frames [seek, seek + size) of mel [n_mels, total] into out [n_mels, window] (resized), zeros
// after them. Throws ShapeError when the range is outside the clip or longer than a window.
void cut_window(const float* mel, int64_t n_mels, int64_t total, int64_t seek, int64_t size,
                int64_t window, std::vector<float>& out);

}  // namespace dasllama::whisper
