// The short-time Fourier transforms of exported iSTFTNet vocoders (Kokoro, Kitten TTS), in the
// arithmetic their ONNX graphs use, so a network that reads the spectrum sees the same values.
//
// NaiveStft is onnxruntime's STFT for a frame length that is not a power of two: the signal
// reflect-padded by n_fft / 2 on both sides, a frame every hop samples times the window, and
// the one-sided DFT summed naively in float32, bin k adding cos/sin(k j step) x_j w_j over j
// in order, the angle (k j) * step rounded to float32 with step = -2 * 3.14159265f / n_fft.
// Magnitude sqrt(re^2 + im^2); phase atan(im / re) moved to the graph's quadrants (+pi when
// re < 0 and im > 0, -pi when re < 0 otherwise). Where a bin is ~0 its phase is rounding noise
// that the network still reads, so every product and sum is its own float32 rounding, in that
// order (no fused multiply-adds: each product is a statement of its own, which the ISO C++
// build does not contract).
//
// BasisIstft is the exporter's inverse: [mag cos(phase); mag sin(phase)] through a transposed
// convolution with the exported basis [2 bins, 1, n_fft] (stride hop), the first samples
// divided by the exported window sum (where it is above FLT_MIN), times n_fft / hop, n_fft / 2
// trimmed from each end. BasisIstft::exact is the true inverse instead (a basis that is the
// one-sided inverse DFT times the window, as a converted PyTorch checkpoint holds): the output
// divided by the overlap-added squared window (torch.istft's envelope), no n_fft / hop factor.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/conv_transpose1d.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

class NaiveStft {
public:
    NaiveStft() = default;
    // window: n_fft floats (n_fft >= 2); hop > 0. ShapeError otherwise.
    NaiveStft(std::vector<float> window, int64_t hop);

    int64_t n_fft() const { return int64_t(window_.size()); }
    int64_t hop() const { return hop_; }
    int64_t bins() const { return n_fft() / 2 + 1; }
    int64_t frames(int64_t n) const { return (n + 2 * (n_fft() / 2) - n_fft()) / hop_ + 1; }
    // x [n] -> out [2 bins, frames(n)]: magnitudes (rows 0..bins-1), then phases. The
    // reflection needs n > n_fft / 2: ShapeError naming n otherwise.
    void forward(const float* x, int64_t n, float* out, ThreadPool& pool) const;

private:
    std::vector<float> window_;
    std::vector<float> cos_, sin_;   // [bins, n_fft]: the graph's float32 twiddles
    int64_t hop_ = 1;
};

class BasisIstft {
public:
    BasisIstft() = default;
    // basis: [2 bins, 1, n_fft] (the real rows, then the imaginary ones); window_sum: the
    // exported sum (its length bounds the samples it divides). ShapeError on bad sizes.
    BasisIstft(const float* basis, int64_t bins, int64_t n_fft, int64_t hop,
               std::vector<float> window_sum);
    // The exact inverse's form: window [n_fft] is the analysis window whose squares, overlap-
    // added every hop, divide the output.
    static BasisIstft exact(const float* basis, int64_t bins, int64_t n_fft, int64_t hop,
                            std::vector<float> window);

    int64_t bins() const { return bins_; }
    // Samples out for `frames` spectrum columns: hop (frames - 1) for an even n_fft.
    int64_t samples(int64_t frames) const {
        return hop_ * (frames - 1) + n_fft_ - 2 * (n_fft_ / 2);
    }
    // mag, phase [bins, frames] -> out [samples(frames)]. ShapeError when frames < 2.
    void forward(const float* mag, const float* phase, int64_t frames, float* out,
                 ThreadPool& pool);

private:
    int64_t bins_ = 0, n_fft_ = 0, hop_ = 1;
    ConvTranspose1d conv_;
    std::vector<float> window_sum_;
    std::vector<float> window_;        // exact(): the window; empty for the exporter's form
    std::vector<float> spec_, full_, envelope_;   // scratch
};

}  // namespace dasllama::nn
