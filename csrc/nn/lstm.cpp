#include "nn/lstm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "nn/linear.h"

namespace dasllama::nn {

namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void LstmState::reset(int64_t hidden) {
    h.assign(size_t(hidden), 0.0f);
    c.assign(size_t(hidden), 0.0f);
    gates.assign(size_t(4 * hidden), 0.0f);
    recur.assign(size_t(4 * hidden), 0.0f);
}

Lstm::Lstm(std::vector<float> weight_ih, std::vector<float> weight_hh,
           const std::vector<float>& bias_ih, const std::vector<float>& bias_hh, int64_t input,
           int64_t hidden)
    : input_(input), hidden_(hidden), w_ih_(std::move(weight_ih)), w_hh_(std::move(weight_hh)) {
    const int64_t g = 4 * hidden;
    auto bad_bias = [g](const std::vector<float>& b) { return !b.empty() && int64_t(b.size()) != g; };
    if (input <= 0 || hidden <= 0 || int64_t(w_ih_.size()) != g * input ||
        int64_t(w_hh_.size()) != g * hidden || bad_bias(bias_ih) || bad_bias(bias_hh))
        throw ShapeError("lstm: weight_ih of " + std::to_string(w_ih_.size()) +
                         " values, weight_hh of " + std::to_string(w_hh_.size()) +
                         ", biases of " + std::to_string(bias_ih.size()) + " and " +
                         std::to_string(bias_hh.size()) + " for input " + std::to_string(input) +
                         ", hidden " + std::to_string(hidden) + " (expected [4H, I], [4H, H], [4H])");
    bias_.assign(size_t(g), 0.0f);
    for (int64_t j = 0; j < g; ++j)
        bias_[size_t(j)] = (bias_ih.empty() ? 0.0f : bias_ih[size_t(j)]) +
                           (bias_hh.empty() ? 0.0f : bias_hh[size_t(j)]);
    ih_ = f32_matrix(w_ih_.data(), g, input);
    hh_ = f32_matrix(w_hh_.data(), g, hidden);
}

LstmState Lstm::new_state() const {
    LstmState s;
    s.reset(hidden_);
    return s;
}

void Lstm::cell(float* z, LstmState& s, ThreadPool& pool) const {
    const int64_t H = hidden_;
    if (int64_t(s.h.size()) != H || int64_t(s.c.size()) != H)
        throw ShapeError("lstm: state of " + std::to_string(s.h.size()) + " and " +
                         std::to_string(s.c.size()) + " values for hidden " + std::to_string(H));
    s.recur.resize(size_t(4 * H));
    cpu::matmul(hh_, s.h.data(), 1, s.recur.data(), pool, cpu::Precision::kF32);
    for (int64_t j = 0; j < 4 * H; ++j) z[j] += s.recur[size_t(j)];
    const float* zi = z;
    const float* zf = z + H;
    const float* zg = z + 2 * H;
    const float* zo = z + 3 * H;
    for (int64_t j = 0; j < H; ++j) {
        const float c = sigmoid(zf[j]) * s.c[size_t(j)] + sigmoid(zi[j]) * std::tanh(zg[j]);
        s.c[size_t(j)] = c;
        s.h[size_t(j)] = sigmoid(zo[j]) * std::tanh(c);
    }
}

void Lstm::step(const float* x, LstmState& s, ThreadPool& pool) const {
    s.gates.resize(size_t(4 * hidden_));
    cpu::matmul(ih_, x, 1, s.gates.data(), pool, cpu::Precision::kF32);
    for (int64_t j = 0; j < 4 * hidden_; ++j) s.gates[size_t(j)] += bias_[size_t(j)];
    cell(s.gates.data(), s, pool);
}

void Lstm::sequence(const float* x, int64_t T, LstmState& s, float* out, ThreadPool& pool,
                    bool reverse) const {
    if (T < 0) throw ShapeError("lstm: sequence of " + std::to_string(T) + " rows");
    if (T == 0) return;
    const int64_t G = 4 * hidden_;
    std::vector<float> z(size_t(T * G));
    cpu::matmul(ih_, x, T, z.data(), pool, cpu::Precision::kF32);
    for (int64_t k = 0; k < T; ++k) {
        const int64_t t = reverse ? T - 1 - k : k;
        float* zt = z.data() + t * G;
        for (int64_t j = 0; j < G; ++j) zt[j] += bias_[size_t(j)];
        cell(zt, s, pool);
        std::copy(s.h.begin(), s.h.end(), out + t * hidden_);
    }
}

void bilstm(const Lstm& fwd, const Lstm& bwd, const float* x, int64_t T, float* out,
            ThreadPool& pool) {
    if (fwd.input_size() != bwd.input_size() || fwd.hidden_size() != bwd.hidden_size())
        throw ShapeError("bilstm: directions of input " + std::to_string(fwd.input_size()) +
                         "/" + std::to_string(bwd.input_size()) + ", hidden " +
                         std::to_string(fwd.hidden_size()) + "/" +
                         std::to_string(bwd.hidden_size()));
    const int64_t H = fwd.hidden_size();
    std::vector<float> f(size_t(T * H)), b(size_t(T * H));
    LstmState sf = fwd.new_state(), sb = bwd.new_state();
    fwd.sequence(x, T, sf, f.data(), pool, false);
    bwd.sequence(x, T, sb, b.data(), pool, true);
    for (int64_t t = 0; t < T; ++t) {
        std::copy(f.begin() + t * H, f.begin() + (t + 1) * H, out + t * 2 * H);
        std::copy(b.begin() + t * H, b.begin() + (t + 1) * H, out + t * 2 * H + H);
    }
}

}  // namespace dasllama::nn
