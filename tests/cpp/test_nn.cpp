// csrc/nn (the blocks the speech models share) against plain double-precision versions written
// here from the definitions: 1-D convolution, STFT power, bidirectional attention (its few-query
// and matmul paths), LayerNorm, erf GELU, softmax, log-sum-exp. Every comparison prints its
// error next to its bar; each has a negative control, a plausible bug whose error must exceed
// the bar tenfold.
#include <algorithm>
#include <cmath>
#include <string>
#include <cstdio>
#include <random>
#include <vector>

#include "check.h"
#include "compare.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "nn/activations.h"
#include "nn/attention_full.h"
#include "nn/conv1d.h"
#include "nn/layer_norm.h"
#include "nn/log_mel.h"

using namespace dasllama;

// Bars: a few times the errors measured on x86-64 (AVX2/AVX-512 float32 kernels against double):
// conv1d 6.8e-8, STFT power 1.2e-7, attention 1.0e-7, layer_norm 4.1e-8, gelu_erf 3.5e-8 (generic).
constexpr double kBarConv = 3e-7;
constexpr double kBarStft = 5e-7;
constexpr double kBarAttend = 4e-7;
constexpr double kBarNorm = 2e-7;
// The vector kernels (erfc fitted to 1.2e-7, a polynomial exp of about 1 ulp): measured
// gelu_erf 3.2e-8, softmax_row 4.6e-8.
constexpr double kBarGelu = 1.5e-7;
constexpr double kBarSoftmax = 1.5e-7;

namespace {

using compare::bites;
using compare::randn;
using compare::rel_l2;
using compare::within;

// x [T, Cin] time-major, w [Cout, Cin, K] -> [T_out, Cout]
std::vector<double> naive_conv(const std::vector<float>& x, int64_t T, int64_t cin,
                               const std::vector<float>& w, const std::vector<float>& b,
                               int64_t cout, int64_t k, int64_t stride, int64_t pad) {
    const int64_t n_out = (T + 2 * pad - k) / stride + 1;
    std::vector<double> y(static_cast<size_t>(n_out * cout));
    for (int64_t t = 0; t < n_out; ++t)
        for (int64_t o = 0; o < cout; ++o) {
            double s = b[size_t(o)];
            for (int64_t j = 0; j < k; ++j) {
                const int64_t src = t * stride - pad + j;
                if (src < 0 || src >= T) continue;
                for (int64_t i = 0; i < cin; ++i)
                    s += double(w[size_t((o * cin + i) * k + j)]) * x[size_t(src * cin + i)];
            }
            y[size_t(t * cout + o)] = s;
        }
    return y;
}

// |DFT|^2 of centered, reflect-padded, periodic-Hann frames: [n_frames, n_fft / 2 + 1]
std::vector<double> naive_power(const std::vector<float>& x, int64_t n_fft, int64_t hop,
                                int64_t frame_shift = 0) {
    const int64_t n = int64_t(x.size()), half = n_fft / 2, frames = 1 + n / hop;
    const double pi = std::acos(-1.0);
    auto sample = [&](int64_t i) {   // i in padded coordinates
        int64_t j = i - half;
        if (j < 0) j = -j;
        if (j >= n) j = 2 * (n - 1) - j;
        return double(x[size_t(j)]);
    };
    std::vector<double> out(static_cast<size_t>(frames * (half + 1)));
    for (int64_t f = 0; f < frames; ++f)
        for (int64_t k = 0; k <= half; ++k) {
            double re = 0, im = 0;
            for (int64_t t = 0; t < n_fft; ++t) {
                const int64_t at = std::min(n + 2 * half - 1, (f + frame_shift) * hop + t);
                const double v = sample(at) * (0.5 - 0.5 * std::cos(2 * pi * t / n_fft));
                re += v * std::cos(2 * pi * k * t / n_fft);
                im -= v * std::sin(2 * pi * k * t / n_fft);
            }
            out[size_t(f * (half + 1) + k)] = re * re + im * im;
        }
    return out;
}

std::vector<double> naive_attend(const std::vector<float>& q, int64_t n_q,
                                 const std::vector<float>& k, const std::vector<float>& v,
                                 int64_t n_kv, int64_t n_head, int64_t hd, double scale) {
    const int64_t d = n_head * hd;
    std::vector<double> out(static_cast<size_t>(n_q * d));
    for (int64_t h = 0; h < n_head; ++h)
        for (int64_t i = 0; i < n_q; ++i) {
            std::vector<double> s(static_cast<size_t>(n_kv));
            double m = -1e300, sum = 0;
            for (int64_t j = 0; j < n_kv; ++j) {
                double dot = 0;
                for (int64_t c = 0; c < hd; ++c)
                    dot += double(q[size_t(i * d + h * hd + c)]) * k[size_t(j * d + h * hd + c)];
                s[size_t(j)] = dot * scale;
                m = std::max(m, s[size_t(j)]);
            }
            for (double& x : s) sum += (x = std::exp(x - m));
            for (int64_t c = 0; c < hd; ++c) {
                double acc = 0;
                for (int64_t j = 0; j < n_kv; ++j) acc += s[size_t(j)] * v[size_t(j * d + h * hd + c)];
                out[size_t(i * d + h * hd + c)] = acc / sum;
            }
        }
    return out;
}

}  // namespace

TEST(conv1d_matches_double) {
    ThreadPool pool(2);
    const int64_t T = 37, cin = 5, cout = 4, k = 3;
    auto x = randn(size_t(T * cin), 1), w = randn(size_t(cout * cin * k), 2), b = randn(4, 3);
    for (int64_t stride : {1, 2}) {
        nn::Conv1d conv(w, b, cout, cin, k, stride, 1);
        std::vector<float> y;
        conv.forward(x.data(), T, y, pool);
        REQUIRE(int64_t(y.size()) == conv.out_length(T) * cout);
        const auto want = naive_conv(x, T, cin, w, b, cout, k, stride, 1);
        CHECK(within(stride == 1 ? "conv1d stride 1" : "conv1d stride 2", rel_l2(y, want), kBarConv));
        CHECK(bites("  control: no padding", rel_l2(y, naive_conv(x, T, cin, w, b, cout, k,
                                                                    stride, 0)), kBarConv));
    }
    CHECK_THROWS_AS(nn::Conv1d(w, b, cout, cin, 4, 1, 1), ShapeError);
}

TEST(power_spectrum_matches_dft) {
    ThreadPool pool(2);
    auto x = randn(1000, 4, 0.3f);
    nn::PowerSpectrum stft(400, 160);
    std::vector<float> p;
    stft.compute(x.data(), int64_t(x.size()), p, pool);
    REQUIRE(int64_t(p.size()) == stft.n_frames(1000) * 201);
    CHECK(within("stft power (n_fft 400, hop 160)", rel_l2(p, naive_power(x, 400, 160)), kBarStft));
    CHECK(bites("  control: frames one hop late", rel_l2(p, naive_power(x, 400, 160, 1)),
                kBarStft));
    CHECK_THROWS_AS(stft.compute(x.data(), 200, p, pool), ShapeError);
}

TEST(attend_all_matches_double) {
    ThreadPool pool(2);
    const int64_t n_head = 3, hd = 16, d = n_head * hd, n_kv = 50;
    auto k = randn(size_t(n_kv * d), 5), v = randn(size_t(n_kv * d), 6);
    nn::HeadKV kv;
    kv.assign(k.data(), v.data(), d, n_kv, n_head, hd);
    nn::AttendScratch scratch;
    const double scale = 1.0 / std::sqrt(double(hd));
    for (int64_t n_q : {1, 5, 20}) {   // the few-query path and the matmul path
        auto q = randn(size_t(n_q * d), 7 + uint32_t(n_q));
        std::vector<float> out(static_cast<size_t>(n_q * d));
        nn::attend_all(kv, q.data(), d, n_q, float(scale), out.data(), d, pool, scratch);
        const std::string what = "attend_all, " + std::to_string(n_q) + " queries";
        CHECK(within(what.c_str(), rel_l2(out, naive_attend(q, n_q, k, v, n_kv, n_head, hd, scale)),
                     kBarAttend));
        CHECK(bites("  control: unscaled scores",
                    rel_l2(out, naive_attend(q, n_q, k, v, n_kv, n_head, hd, 1.0)), kBarAttend));
    }
}

TEST(layer_norm_and_gelu_match_double) {
    ThreadPool pool(2);
    const int64_t rows = 7, n = 64;
    auto x = randn(size_t(rows * n), 11, 3.0f), w = randn(size_t(n), 12), b = randn(size_t(n), 13);
    std::vector<float> y(x.size());
    nn::layer_norm(x.data(), w.data(), b.data(), rows, n, 1e-5, y.data());
    std::vector<double> want(x.size()), unbiased(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < n; ++i) mean += x[size_t(r * n + i)];
        mean /= n;
        for (int64_t i = 0; i < n; ++i) var += std::pow(x[size_t(r * n + i)] - mean, 2);
        for (int64_t i = 0; i < n; ++i) {
            const double c = x[size_t(r * n + i)] - mean;
            want[size_t(r * n + i)] = c / std::sqrt(var / n + 1e-5) * w[size_t(i)] + b[size_t(i)];
            unbiased[size_t(r * n + i)] = c / std::sqrt(var / (n - 1) + 1e-5) * w[size_t(i)] + b[size_t(i)];
        }
    }
    CHECK(within("layer_norm", rel_l2(y, want), kBarNorm));
    CHECK(bites("  control: unbiased variance", rel_l2(y, unbiased), kBarNorm));

    auto g = randn(40000, 14, 2.0f);   // above the size that splits over the pool
    std::vector<double> gw(g.size()), gt(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
        const double v = g[i];
        gw[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
        gt[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::acos(-1.0)) * (v + 0.044715 * v * v * v)));
    }
    for (const std::string& isa : nn::act::available_variants()) {
        std::vector<float> y = g;
        nn::act::variant(isa).gelu_erf(y.data(), int64_t(y.size()));
        CHECK(within(("gelu_erf " + isa).c_str(), rel_l2(y, gw), kBarGelu));
        CHECK(bites("  control: the tanh form", rel_l2(y, gt), kBarGelu));
        // the tails: far negative goes to -0, far positive to x
        std::vector<float> tails = {-30.0f, -12.0f, 12.0f, 30.0f, 0.0f};
        nn::act::variant(isa).gelu_erf(tails.data(), 5);
        CHECK(std::fabs(tails[0]) < 1e-30f && std::fabs(tails[1]) < 1e-30f);
        CHECK(tails[2] == 12.0f && tails[3] == 30.0f && tails[4] == 0.0f);
    }
    nn::gelu_erf(g.data(), int64_t(g.size()), pool);   // the pooled entry point
    CHECK(within("gelu_erf (pooled)", rel_l2(g, gw), kBarGelu));
}

TEST(softmax_row_matches_double) {
    for (const std::string& isa : nn::act::available_variants()) {
        for (int64_t n : {1, 7, 8, 1500, 1503}) {
            auto x = randn(size_t(n), 30 + uint32_t(n), 4.0f);
            const float m = *std::max_element(x.begin(), x.end());
            std::vector<double> want(x.size()), flat(x.size(), 1.0 / double(n));
            double sum = 0;
            for (size_t i = 0; i < x.size(); ++i) sum += (want[i] = std::exp(double(x[i]) - m));
            for (double& w : want) w /= sum;
            nn::act::variant(isa).softmax_row(x.data(), n);
            const std::string what = "softmax_row " + isa + " n=" + std::to_string(n);
            CHECK(within(what.c_str(), rel_l2(x, want), kBarSoftmax));
            if (n > 1) CHECK(bites("  control: uniform weights", rel_l2(x, flat), kBarSoftmax));
        }
    }
}

// log_sum_exp of a decoding step's logits (51864 of them, a third masked to -inf as the rules
// mask) against double; a row of -inf gives -inf. Absolute error, since log-probabilities are
// differences from it: measured 1.0e-8 (avx2, n = 51864), 0 (generic); the control leaves the
// largest logit out, which moves it by 3e-2 and more.
constexpr double kBarLogSumExp = 5e-8;

TEST(log_sum_exp_matches_double) {
    for (const std::string& isa : nn::act::available_variants()) {
        for (int64_t n : {1, 9, 1501, 51864}) {
            auto x = randn(size_t(n), 50 + uint32_t(n), 3.0f);
            for (int64_t i = 0; i < n; i += 3) x[size_t(i)] = -INFINITY;
            if (n == 1) x[0] = 2.5f;
            const float m = *std::max_element(x.begin(), x.end());
            double sum = 0;
            for (float v : x) sum += std::exp(double(v) - double(m));
            const double want = double(m) + std::log(sum);
            const double got = nn::act::variant(isa).log_sum_exp(x.data(), n);
            const double err = std::fabs(got - want);
            std::printf("  log_sum_exp %-6s n=%-6lld abs err %.3e  (bar %.1e)\n", isa.c_str(),
                        (long long)n, err, kBarLogSumExp);
            CHECK(err <= kBarLogSumExp);
            if (n > 1) {
                const int64_t drop = int64_t(std::max_element(x.begin(), x.end()) - x.begin());
                auto y = x;
                y[size_t(drop)] = -INFINITY;
                const double off =
                    std::fabs(nn::act::variant(isa).log_sum_exp(y.data(), n) - want);
                std::printf("    control: the largest logit left out   abs err %.3e  "
                            "(must be > %.1e)\n", off, 10 * kBarLogSumExp);
                CHECK(off > 10 * kBarLogSumExp);
            }
        }
        std::vector<float> masked(13, -INFINITY);
        CHECK(std::isinf(nn::act::variant(isa).log_sum_exp(masked.data(), 13)));
        CHECK(nn::act::variant(isa).log_sum_exp(masked.data(), 13) < 0);
    }
    std::vector<float> one{0.0f, 0.0f};
    CHECK(std::fabs(nn::log_sum_exp(one.data(), 2) - std::log(2.0)) < 1e-12);
}
