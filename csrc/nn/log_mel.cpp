#include "nn/log_mel.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "nn/linear.h"

namespace dasllama::nn {

PowerSpectrum::PowerSpectrum(int64_t n_fft, int64_t hop) : n_fft_(n_fft), hop_(hop) {
    if (n_fft < 2 || hop < 1)
        throw ShapeError("stft: n_fft " + std::to_string(n_fft) + ", hop " + std::to_string(hop));
    const int64_t bins = n_bins();
    basis_data_.resize(size_t(2 * bins * n_fft));
    const double two_pi = 2.0 * std::acos(-1.0);
    for (int64_t k = 0; k < bins; ++k)
        for (int64_t t = 0; t < n_fft; ++t) {
            const double window = 0.5 - 0.5 * std::cos(two_pi * double(t) / double(n_fft));
            // k * t mod n_fft keeps the angle small, so cos/sin stay exact in double
            const double angle = two_pi * double((k * t) % n_fft) / double(n_fft);
            basis_data_[size_t(k * n_fft + t)] = float(window * std::cos(angle));
            basis_data_[size_t((bins + k) * n_fft + t)] = float(-window * std::sin(angle));
        }
    basis_ = f32_matrix(basis_data_.data(), 2 * bins, n_fft);
}

void PowerSpectrum::compute(const float* audio, int64_t n, std::vector<float>& power,
                            ThreadPool& pool) {
    const int64_t half = n_fft_ / 2;
    if (n <= half)
        throw ShapeError("stft: " + std::to_string(n) + " samples are too few for centered "
                         "frames of " + std::to_string(n_fft_) + " (at least " +
                         std::to_string(half + 1) + ")");
    padded_.resize(size_t(n + 2 * half));
    std::copy(audio, audio + n, padded_.begin() + half);
    for (int64_t i = 0; i < half; ++i) {
        padded_[size_t(half - 1 - i)] = audio[i + 1];            // reflect about sample 0
        padded_[size_t(half + n + i)] = audio[n - 2 - i];        // and about sample n - 1
    }
    const int64_t frames = n_frames(n);
    spectrum_.resize(size_t(frames * 2 * n_bins()));
    cpu::matmul_f32_strided(basis_, padded_.data(), hop_, frames, spectrum_.data(), pool);
    spectrum_to_power(frames, power);
}

void PowerSpectrum::compute_frames(const float* audio, int64_t n, int64_t zeros, int64_t f0,
                                   int64_t nf, std::vector<float>& power, ThreadPool& pool) {
    compute_frames(audio, 0, n, n, zeros, f0, nf, power, pool);
}

void PowerSpectrum::compute_frames(const float* span, int64_t offset, int64_t avail, int64_t n,
                                   int64_t zeros, int64_t f0, int64_t nf,
                                   std::vector<float>& power, ThreadPool& pool) {
    const int64_t half = n_fft_ / 2, total = n + zeros;
    if (n < 0 || zeros < 0 || total <= half)
        throw ShapeError("stft: " + std::to_string(total) + " samples are too few for centered "
                         "frames of " + std::to_string(n_fft_) + " (at least " +
                         std::to_string(half + 1) + ")");
    if (f0 < 0 || nf <= 0 || f0 + nf > n_frames(total))
        throw ShapeError("stft: frames [" + std::to_string(f0) + ", " + std::to_string(f0 + nf) +
                         ") of a signal of " + std::to_string(n_frames(total)) + " frames");
    // Samples [f0 * hop - half, (f0 + nf - 1) * hop - half + n_fft) of the centered signal,
    // reflected about its first and last samples as compute() pads it.
    const int64_t first = f0 * hop_ - half, count = (nf - 1) * hop_ + n_fft_;
    const auto source = [&](int64_t i) {   // the signal's sample behind padded row i
        const int64_t p = first + i;
        return p < 0 ? -p : p >= total ? 2 * (total - 1) - p : p;
    };
    int64_t lo = n, hi = -1;   // the span of real samples the frames read
    for (int64_t i = 0; i < count; ++i) {
        const int64_t p = source(i);
        if (p < n) {
            lo = std::min(lo, p);
            hi = std::max(hi, p);
        }
    }
    if (offset < 0 || avail < 0 || (hi >= lo && (lo < offset || hi >= offset + avail)))
        throw ShapeError("stft: frames [" + std::to_string(f0) + ", " + std::to_string(f0 + nf) +
                         ") read samples [" + std::to_string(lo) + ", " + std::to_string(hi + 1) +
                         "), outside the " + std::to_string(avail) + " samples at hand from " +
                         std::to_string(offset));
    padded_.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) {
        const int64_t p = source(i);
        padded_[size_t(i)] = p < n ? span[p - offset] : 0.0f;
    }
    spectrum_.resize(size_t(nf * 2 * n_bins()));
    cpu::matmul_f32_strided(basis_, padded_.data(), hop_, nf, spectrum_.data(), pool);
    spectrum_to_power(nf, power);
}

void PowerSpectrum::spectrum_to_power(int64_t frames, std::vector<float>& power) {
    const int64_t bins = n_bins();
    power.resize(size_t(frames * bins));
    for (int64_t f = 0; f < frames; ++f) {
        const float* s = spectrum_.data() + f * 2 * bins;
        float* p = power.data() + f * bins;
        for (int64_t k = 0; k < bins; ++k) p[k] = s[k] * s[k] + s[bins + k] * s[bins + k];
    }
}

void mel_log10(const cpu::WeightMatrix& filters, const float* power, int64_t n_frames,
               float floor, std::vector<float>& out, ThreadPool& pool) {
    out.resize(size_t(n_frames * filters.rows));
    cpu::matmul(filters, power, n_frames, out.data(), pool, cpu::Precision::kF32);
    for (float& v : out) v = std::log10(std::max(v, floor));
}

}  // namespace dasllama::nn
