// Short-time power spectra and log-mel spectrograms of float32 audio, for the speech models.
//
// PowerSpectrum: frames of n_fft samples every hop samples, centered (the signal is padded by
// n_fft/2 samples on each side, reflected about its end samples, torch.stft's center=True),
// weighted by a periodic Hann window, and |DFT|^2 of bins 0..n_fft/2. The DFT is a float32
// matmul of the frames against a windowed cos/sin basis (any n_fft, no power-of-two FFT), whose
// activation rows are the overlapping frames themselves (cpu::matmul_f32_strided).
// mel_log10: a filterbank [n_mels, n_bins] over power rows, then log10(max(x, floor)).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/matmul.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

class PowerSpectrum {
public:
    PowerSpectrum(int64_t n_fft, int64_t hop);
    PowerSpectrum(const PowerSpectrum&) = delete;   // basis_ views basis_data_
    PowerSpectrum& operator=(const PowerSpectrum&) = delete;
    PowerSpectrum(PowerSpectrum&&) = default;

    int64_t n_bins() const { return n_fft_ / 2 + 1; }
    // Frames of a signal of n samples: 1 + n / hop.
    int64_t n_frames(int64_t n) const { return 1 + n / hop_; }
    // audio [n] -> power [n_frames(n), n_bins] (resized). Throws ShapeError when n is too short
    // to reflect (n <= n_fft / 2).
    void compute(const float* audio, int64_t n, std::vector<float>& power, ThreadPool& pool);
    // Frames [f0, f0 + nf) of compute() over the signal audio[0..n) followed by `zeros` zero
    // samples, without padding a copy of the whole signal: the same values compute() gives
    // those frames (each frame is its own row of the product), so a long clip can be taken a
    // stretch at a time in bounded memory. power [nf, n_bins] (resized). Throws ShapeError as
    // compute() does, and for frames outside [0, n_frames(n + zeros)).
    void compute_frames(const float* audio, int64_t n, int64_t zeros, int64_t f0, int64_t nf,
                        std::vector<float>& power, ThreadPool& pool);
    // The same frames when only samples [offset, offset + avail) of the signal are at hand
    // (span[0] is sample offset): a stream held a stretch at a time. Throws ShapeError, as
    // above, and when the frames read a sample outside the span.
    void compute_frames(const float* span, int64_t offset, int64_t avail, int64_t n,
                        int64_t zeros, int64_t f0, int64_t nf, std::vector<float>& power,
                        ThreadPool& pool);

private:
    void spectrum_to_power(int64_t frames, std::vector<float>& power);

    int64_t n_fft_, hop_;
    std::vector<float> basis_data_;   // [2 * n_bins, n_fft]: cos rows, then -sin rows
    cpu::WeightMatrix basis_;
    std::vector<float> padded_, spectrum_;
};

// power [n_frames, n_bins] -> out [n_frames, n_mels] = log10(max(filters . power, floor)).
void mel_log10(const cpu::WeightMatrix& filters, const float* power, int64_t n_frames,
               float floor, std::vector<float>& out, ThreadPool& pool);

}  // namespace dasllama::nn
