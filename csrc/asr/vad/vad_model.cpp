#include "asr/vad/vad_model.h"

#include <algorithm>
#include <string>

#include "asr/vad/decoder.h"
#include "core/errors.h"

namespace dasllama::vad {

SileroVad::SileroVad(const std::string& path, int n_threads)
    : w_(load_vad_weights(path)), pool_(n_threads) {}

VadStream SileroVad::new_stream() const {
    VadStream s;
    reset(s);
    return s;
}

void SileroVad::reset(VadStream& s) const {
    s.input.assign(size_t(w_->cfg.input()), 0.0f);
    s.lstm.reset(w_->cfg.hidden);
    s.windows = 0;
}

float SileroVad::step_locked(const float* window, VadStream& s) {
    const VadConfig& c = w_->cfg;
    if (int64_t(s.input.size()) != c.input() || int64_t(s.lstm.h.size()) != c.hidden)
        throw ShapeError("silero vad: a stream of another model (input " +
                         std::to_string(s.input.size()) + " samples, expected " +
                         std::to_string(c.input()) + ")");
    // The step reads the previous window's last `context` samples, then this window.
    std::copy(s.input.end() - c.context, s.input.end(), s.input.begin());
    std::copy(window, window + c.window, s.input.begin() + c.context);
    stft_.run(*w_, s.input.data(), mag_, pool_);
    encoder_.run(*w_, mag_.data(), int64_t(mag_.size()) / c.n_bins(), enc_, pool_);
    ++s.windows;
    return decode_step(*w_, enc_.data(), s.lstm, pool_);
}

float SileroVad::process(const float* window, VadStream& s) {
    std::lock_guard<std::mutex> lock(mu_);
    return step_locked(window, s);
}

void SileroVad::process(const float* samples, int64_t n, VadStream& s, float* out) {
    const int64_t W = w_->cfg.window;
    if (n < 0 || n % W)
        throw ShapeError("silero vad: " + std::to_string(n) + " samples are not a multiple of " +
                         "the window of " + std::to_string(W));
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t i = 0; i < n / W; ++i) out[i] = step_locked(samples + i * W, s);
}

std::vector<float> SileroVad::probabilities(const float* audio, int64_t n) {
    const int64_t W = w_->cfg.window;
    if (n < 0) throw ShapeError("silero vad: " + std::to_string(n) + " samples");
    const int64_t full = n / W, n_windows = (n + W - 1) / W;
    std::vector<float> out(static_cast<size_t>(n_windows));
    VadStream s = new_stream();
    process(audio, full * W, s, out.data());
    if (n_windows > full) {
        std::vector<float> last(static_cast<size_t>(W), 0.0f);
        std::copy(audio + full * W, audio + n, last.begin());
        out[size_t(full)] = process(last.data(), s);
    }
    return out;
}

}  // namespace dasllama::vad
