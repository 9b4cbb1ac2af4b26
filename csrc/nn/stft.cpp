#include "nn/stft.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"

namespace dasllama::nn {

namespace {

// onnxruntime's float32 spelling of pi in the DFT's angle step; the quadrant fix of the
// phase uses the correctly rounded float32 pi instead (the graph's Atan branch constant).
constexpr float kDftPi = 3.14159265f;
constexpr float kPi = 3.14159265358979323846f;

template <typename Fn>
void parallel_range(ThreadPool& pool, int64_t n, const Fn& fn) {
    pool.run([&](int share, int shares) {
        const int64_t r0 = n * share / shares, r1 = n * (share + 1) / shares;
        if (r0 < r1) fn(r0, r1);
    });
}

}  // namespace

NaiveStft::NaiveStft(std::vector<float> window, int64_t hop)
    : window_(std::move(window)), hop_(hop) {
    if (window_.size() < 2)
        throw ShapeError("stft: a window of " + std::to_string(window_.size()) +
                         " samples (n_fft must be at least 2)");
    if (hop <= 0) throw ShapeError("stft: hop " + std::to_string(hop) + " must be positive");
    const int64_t n = n_fft(), nb = bins();
    const float two_pi = 2.0f * kDftPi;
    const float step = (-1.0f * two_pi) / float(n);
    cos_.resize(size_t(nb * n));
    sin_.resize(size_t(nb * n));
    for (int64_t k = 0; k < nb; ++k)
        for (int64_t j = 0; j < n; ++j) {
            const float angle = float(k * j) * step;
            cos_[size_t(k * n + j)] = float(std::cos(double(angle)));
            sin_[size_t(k * n + j)] = float(std::sin(double(angle)));
        }
}

void NaiveStft::forward(const float* x, int64_t n, float* out, ThreadPool& pool) const {
    const int64_t nf = n_fft(), pad = nf / 2, nb = bins();
    if (n <= pad)
        throw ShapeError("stft: a signal of " + std::to_string(n) + " samples is too short to "
                         "reflect-pad by " + std::to_string(pad));
    const int64_t count = frames(n);
    float* mag = out;
    float* phase = out + nb * count;
    parallel_range(pool, count, [&](int64_t f0, int64_t f1) {
        std::vector<float> frame(static_cast<size_t>(nf));
        for (int64_t f = f0; f < f1; ++f) {
            for (int64_t j = 0; j < nf; ++j) {
                int64_t i = f * hop_ + j - pad;   // reflect about the first and last sample
                if (i < 0) i = -i;
                if (i >= n) i = 2 * (n - 1) - i;
                frame[size_t(j)] = x[i] * window_[size_t(j)];
            }
            for (int64_t k = 0; k < nb; ++k) {
                const float* c = cos_.data() + k * nf;
                const float* s = sin_.data() + k * nf;
                float re = 0.0f, im = 0.0f;
                for (int64_t j = 0; j < nf; ++j) {
                    const float pr = c[j] * frame[size_t(j)];
                    const float pi = s[j] * frame[size_t(j)];
                    re = re + pr;
                    im = im + pi;
                }
                const float rr = re * re;
                const float ii = im * im;
                mag[k * count + f] = std::sqrt(rr + ii);
                const float a = std::atan(im / re);
                phase[k * count + f] = re < 0.0f ? (im > 0.0f ? a + kPi : a - kPi) : a;
            }
        }
    });
}

BasisIstft::BasisIstft(const float* basis, int64_t bins, int64_t n_fft, int64_t hop,
                       std::vector<float> window_sum)
    : bins_(bins), n_fft_(n_fft), hop_(hop), window_sum_(std::move(window_sum)) {
    if (bins <= 0 || n_fft <= 0 || hop <= 0)
        throw ShapeError("istft: bins " + std::to_string(bins) + ", n_fft " +
                         std::to_string(n_fft) + ", hop " + std::to_string(hop) +
                         " must be positive");
    ConvTransposeAttrs a;
    a.stride = hop;
    conv_ = ConvTranspose1d(basis, 2 * bins, 1, n_fft, {}, a);
}

BasisIstft BasisIstft::exact(const float* basis, int64_t bins, int64_t n_fft, int64_t hop,
                             std::vector<float> window) {
    if (int64_t(window.size()) != n_fft)
        throw ShapeError("istft: a window of " + std::to_string(window.size()) +
                         " values for n_fft " + std::to_string(n_fft));
    BasisIstft b(basis, bins, n_fft, hop, {});
    b.window_ = std::move(window);
    return b;
}

void BasisIstft::forward(const float* mag, const float* phase, int64_t frames, float* out,
                         ThreadPool& pool) {
    if (frames < 2)
        throw ShapeError("istft: " + std::to_string(frames) + " spectrum frames (at least 2)");
    const int64_t nb = bins_;
    spec_.resize(size_t(2 * nb * frames));
    parallel_range(pool, nb, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k)
            for (int64_t f = 0; f < frames; ++f) {
                const float m = mag[k * frames + f], p = phase[k * frames + f];
                spec_[size_t(k * frames + f)] = m * std::cos(p);
                spec_[size_t((nb + k) * frames + f)] = m * std::sin(p);
            }
    });
    const int64_t len = conv_.out_length(frames);
    full_.resize(size_t(len));
    conv_.forward(spec_.data(), frames, full_.data(), pool);
    const int64_t trim = n_fft_ / 2, n_out = samples(frames);
    if (!window_.empty()) {   // the exact inverse: divide by the overlap-added squared window
        envelope_.assign(size_t(len), 0.0f);
        for (int64_t start = 0; start + n_fft_ <= len; start += hop_)
            for (int64_t j = 0; j < n_fft_; ++j) {
                const float w2 = window_[size_t(j)] * window_[size_t(j)];
                envelope_[size_t(start + j)] = envelope_[size_t(start + j)] + w2;
            }
        for (int64_t i = 0; i < n_out; ++i)
            out[i] = full_[size_t(trim + i)] / envelope_[size_t(trim + i)];
        return;
    }
    const int64_t divided = std::min<int64_t>(len, int64_t(window_sum_.size()));
    for (int64_t i = 0; i < divided; ++i)
        if (window_sum_[size_t(i)] > FLT_MIN) full_[size_t(i)] = full_[size_t(i)] / window_sum_[size_t(i)];
    const float scale = float(double(n_fft_) / double(hop_));
    for (int64_t i = 0; i < n_out; ++i) out[i] = full_[size_t(trim + i)] * scale;
}

}  // namespace dasllama::nn
