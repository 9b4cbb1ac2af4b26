// csrc/nn/lstm (the LSTM Silero VAD steps and Kokoro's BiLSTMs will run) against a plain
// double-precision LSTM written here from torch.nn.LSTM's definition (gates i, f, g, o):
// one step, a sequence (== its steps), the reverse direction, the bidirectional layout, and
// shape errors. Each comparison prints its error next to its bar and has a negative control (a
// plausible bug whose error must exceed the bar tenfold).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "nn/lstm.h"

using namespace dasllama;

// Bar: a few times the error measured on x86-64 (float32 kernels and expf/tanhf against
// double): 1.1e-7 .. 1.3e-7 rel-l2 over 12 steps.
constexpr double kBarLstm = 3e-7;

namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

bool within(const char* what, double err, double bar) {
    std::printf("  %-44s rel-l2 %.3e  (bar %.1e)\n", what, err, bar);
    return err <= bar;
}

bool bites(const char* what, double err, double bar) {
    std::printf("  %-44s rel-l2 %.3e  (must be > %.1e)\n", what, err, 10 * bar);
    return err > 10 * bar;
}

struct Params {
    int64_t I, H;
    std::vector<float> w_ih, w_hh, b_ih, b_hh;
};

Params params(int64_t I, int64_t H, uint32_t seed) {
    const float s = 1.0f / std::sqrt(float(H));
    return {I, H, randn(size_t(4 * H * I), seed, s), randn(size_t(4 * H * H), seed + 1, s),
            randn(size_t(4 * H), seed + 2, s), randn(size_t(4 * H), seed + 3, s)};
}

// The definition in double: h_t for every t of x [T, I]; `order` names where each of the gates
// i, f, g, o sits among the four blocks (the control passes another order).
std::vector<double> naive(const Params& p, const std::vector<float>& x, int64_t T,
                          bool reverse = false, const int order[4] = nullptr) {
    static const int torch_order[4] = {0, 1, 2, 3};
    if (!order) order = torch_order;
    const int64_t I = p.I, H = p.H;
    std::vector<double> h(size_t(H), 0.0), c(size_t(H), 0.0), out(size_t(T * H)), z(size_t(4 * H));
    auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
    for (int64_t k = 0; k < T; ++k) {
        const int64_t t = reverse ? T - 1 - k : k;
        for (int64_t r = 0; r < 4 * H; ++r) {
            double acc = double(p.b_ih[size_t(r)]) + double(p.b_hh[size_t(r)]);
            for (int64_t j = 0; j < I; ++j)
                acc += double(p.w_ih[size_t(r * I + j)]) * double(x[size_t(t * I + j)]);
            for (int64_t j = 0; j < H; ++j) acc += double(p.w_hh[size_t(r * H + j)]) * h[size_t(j)];
            z[size_t(r)] = acc;
        }
        for (int64_t j = 0; j < H; ++j) {
            const double i = sig(z[size_t(order[0] * H + j)]), f = sig(z[size_t(order[1] * H + j)]);
            const double g = std::tanh(z[size_t(order[2] * H + j)]);
            const double o = sig(z[size_t(order[3] * H + j)]);
            c[size_t(j)] = f * c[size_t(j)] + i * g;
            h[size_t(j)] = o * std::tanh(c[size_t(j)]);
        }
        for (int64_t j = 0; j < H; ++j) out[size_t(t * H + j)] = h[size_t(j)];
    }
    return out;
}

nn::Lstm make(const Params& p) { return nn::Lstm(p.w_ih, p.w_hh, p.b_ih, p.b_hh, p.I, p.H); }

}  // namespace

TEST(lstm_step_matches_double) {
    ThreadPool pool(2);
    for (auto [I, H] : {std::pair<int64_t, int64_t>{128, 128}, {37, 20}, {5, 64}}) {
        const int64_t T = 12;
        const Params p = params(I, H, 7 + uint32_t(I));
        const nn::Lstm lstm = make(p);
        const auto x = randn(size_t(T * I), 100 + uint32_t(H));
        nn::LstmState s = lstm.new_state();
        std::vector<float> got(size_t(T * H));
        for (int64_t t = 0; t < T; ++t) {
            lstm.step(x.data() + t * I, s, pool);
            std::copy(s.h.begin(), s.h.end(), got.begin() + t * H);
        }
        const std::string what = "step x12, I=" + std::to_string(I) + " H=" + std::to_string(H);
        CHECK(within(what.c_str(), rel_l2(got, naive(p, x, T)), kBarLstm));
        static const int swapped[4] = {0, 2, 1, 3};   // f and g blocks exchanged
        CHECK(bites("  control: gates f and g swapped", rel_l2(got, naive(p, x, T, false, swapped)),
                    kBarLstm));
        // The control for state carried between steps: every step from zeros.
        std::vector<double> fresh;
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float> xt(x.begin() + t * I, x.begin() + (t + 1) * I);
            const auto one = naive(p, xt, 1);
            fresh.insert(fresh.end(), one.begin(), one.end());
        }
        CHECK(bites("  control: state reset every step", rel_l2(got, fresh), kBarLstm));
    }
}

TEST(lstm_sequence_equals_steps_and_reverse) {
    ThreadPool pool(2);
    const int64_t I = 24, H = 16, T = 9;
    const Params p = params(I, H, 3);
    const nn::Lstm lstm = make(p);
    const auto x = randn(size_t(T * I), 5);
    std::vector<float> seq(size_t(T * H)), rev(size_t(T * H));
    nn::LstmState s = lstm.new_state();
    lstm.sequence(x.data(), T, s, seq.data(), pool);
    CHECK(within("sequence", rel_l2(seq, naive(p, x, T)), kBarLstm));
    // The state left behind is the last step's: one more step continues the sequence.
    const auto x2 = randn(size_t(I), 6);
    std::vector<float> both(x);
    both.insert(both.end(), x2.begin(), x2.end());
    lstm.step(x2.data(), s, pool);
    const auto want2 = naive(p, both, T + 1);
    CHECK(within("state carried out of sequence",
                 rel_l2(s.h, std::vector<double>(want2.end() - H, want2.end())), kBarLstm));
    nn::LstmState r = lstm.new_state();
    lstm.sequence(x.data(), T, r, rev.data(), pool, /*reverse=*/true);
    CHECK(within("reverse", rel_l2(rev, naive(p, x, T, true)), kBarLstm));
    CHECK(bites("  control: reverse read forward", rel_l2(rev, naive(p, x, T, false)), kBarLstm));

    // bilstm: row t = [forward h_t | backward h_t].
    const Params q = params(I, H, 11);
    const nn::Lstm bwd = make(q);
    std::vector<float> bi(size_t(T * 2 * H));
    nn::bilstm(lstm, bwd, x.data(), T, bi.data(), pool);
    const auto f = naive(p, x, T), b = naive(q, x, T, true);
    std::vector<double> want(size_t(T * 2 * H)), crossed(size_t(T * 2 * H));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < H; ++j) {
            want[size_t(t * 2 * H + j)] = f[size_t(t * H + j)];
            want[size_t(t * 2 * H + H + j)] = b[size_t(t * H + j)];
            crossed[size_t(t * 2 * H + j)] = b[size_t(t * H + j)];
            crossed[size_t(t * 2 * H + H + j)] = f[size_t(t * H + j)];
        }
    CHECK(within("bilstm [fwd | bwd]", rel_l2(bi, want), kBarLstm));
    CHECK(bites("  control: halves exchanged", rel_l2(bi, crossed), kBarLstm));
}

TEST(lstm_shapes_are_checked) {
    const Params p = params(8, 4, 1);
    CHECK_THROWS_AS(nn::Lstm(p.w_ih, p.w_hh, p.b_ih, p.b_hh, 9, 4), ShapeError);
    CHECK_THROWS_AS(nn::Lstm(p.w_ih, p.w_hh, std::vector<float>(3), p.b_hh, 8, 4), ShapeError);
    CHECK_THROWS_AS(nn::Lstm(p.w_ih, p.w_hh, p.b_ih, p.b_hh, 8, 0), ShapeError);
    const nn::Lstm lstm = make(p);
    ThreadPool pool(1);
    nn::LstmState wrong;
    wrong.reset(5);
    std::vector<float> x(8, 0.5f);
    CHECK_THROWS_AS(lstm.step(x.data(), wrong, pool), ShapeError);
    std::vector<float> out(4);
    nn::LstmState s = lstm.new_state();
    CHECK_THROWS_AS(lstm.sequence(x.data(), -1, s, out.data(), pool), ShapeError);
    lstm.sequence(x.data(), 0, s, out.data(), pool);   // nothing to do
    CHECK(s.h == std::vector<float>(4, 0.0f));
}
