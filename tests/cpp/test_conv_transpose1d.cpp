// csrc/nn/conv_transpose1d against a plain double-precision scatter written here from the
// definition (torch.nn.ConvTranspose1d / ONNX ConvTranspose): dense with the StyleTTS2
// generator's upsamplings (x10 K20 pad 5, x6 K12 pad 3), a depthwise x2 with output padding,
// grouped, dilated and asymmetric padding, plus shape errors. Each comparison prints its error
// next to its bar and has a negative control whose error must exceed the bar tenfold.
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "core/errors.h"
#include "core/thread_pool.h"
#include "nn/conv_transpose1d.h"

using namespace dasllama;

// Bar: a few times the error measured on x86-64 (float32 sums of up to 512 * 2 products
// against double): 4e-8 .. 1e-7 rel-l2.
constexpr double kBar = 3e-7;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

struct Case {
    int64_t c_in, c_out, k, n;
    nn::ConvTransposeAttrs a;
    bool bias;
};

// The definition: y[o, s m + d t - pl] += w[i, o % cout_g, t] x[i, m] over i in o's group.
std::vector<double> naive(const Case& c, const std::vector<float>& w,
                          const std::vector<float>& b, const std::vector<float>& x,
                          int64_t shift = 0) {
    const auto& a = c.a;
    const int64_t len = a.stride * (c.n - 1) + a.dilation * (c.k - 1) + 1 + a.output_padding -
                        a.pad_left - a.pad_right;
    const int64_t cin_g = c.c_in / a.groups, cout_g = c.c_out / a.groups;
    std::vector<double> y(size_t(c.c_out * len), 0.0);
    for (int64_t o = 0; o < c.c_out; ++o) {
        if (c.bias)
            for (int64_t j = 0; j < len; ++j) y[size_t(o * len + j)] = b[size_t(o)];
        const int64_t g = o / cout_g;
        for (int64_t i = g * cin_g; i < (g + 1) * cin_g; ++i)
            for (int64_t m = 0; m < c.n; ++m)
                for (int64_t t = 0; t < c.k; ++t) {
                    const int64_t j = a.stride * m + a.dilation * t - a.pad_left + shift;
                    if (j < 0 || j >= len) continue;
                    y[size_t(o * len + j)] += double(w[size_t((i * cout_g + o % cout_g) * c.k + t)]) *
                                              double(x[size_t(i * c.n + m)]);
                }
    }
    return y;
}

double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

nn::ConvTransposeAttrs attrs(int64_t s, int64_t pl, int64_t pr, int64_t d, int64_t g,
                             int64_t op) {
    nn::ConvTransposeAttrs a;
    a.stride = s;
    a.pad_left = pl;
    a.pad_right = pr;
    a.dilation = d;
    a.groups = g;
    a.output_padding = op;
    return a;
}

}  // namespace

TEST(conv_transpose1d_matches_the_definition) {
    ThreadPool pool(2);
    const Case cases[] = {
        {512, 256, 20, 37, attrs(10, 5, 5, 1, 1, 0), true},    // the generator's x10
        {256, 128, 12, 41, attrs(6, 3, 3, 1, 1, 0), true},     // the generator's x6
        {64, 64, 3, 50, attrs(2, 1, 1, 1, 64, 1), true},       // depthwise x2 (AdainResBlk1d)
        {22, 1, 20, 33, attrs(5, 0, 0, 1, 1, 0), false},       // the iSTFT's basis
        {12, 8, 5, 19, attrs(3, 2, 0, 2, 2, 1), true},         // grouped, dilated, asymmetric
        {6, 12, 4, 9, attrs(2, 0, 3, 1, 6, 0), false},         // one input channel per group
    };
    uint32_t seed = 11;
    for (const Case& c : cases) {
        const int64_t cout_g = c.c_out / c.a.groups;
        const auto w = randn(size_t(c.c_in * cout_g * c.k), seed++);
        const auto b = c.bias ? randn(size_t(c.c_out), seed++) : std::vector<float>{};
        const auto x = randn(size_t(c.c_in * c.n), seed++);
        nn::ConvTranspose1d conv(w.data(), c.c_in, c.c_out, c.k, b, c.a);
        std::vector<float> y;
        conv.forward(x.data(), c.n, y, pool);
        const auto want = naive(c, w, b, x);
        REQUIRE(y.size() == want.size());
        const double err = rel_l2(y, want);
        const double control = rel_l2(y, naive(c, w, b, x, 1));   // output one sample late
        std::printf("  [%lld -> %lld, K %lld, s %lld, g %lld] rel-l2 %.2e (bar %.0e); "
                    "control (one sample late) %.2e\n", (long long)c.c_in, (long long)c.c_out,
                    (long long)c.k, (long long)c.a.stride, (long long)c.a.groups, err, kBar,
                    control);
        CHECK(err <= kBar);
        CHECK(control > 10 * kBar);
    }
}

TEST(conv_transpose1d_one_thread_equals_two) {
    ThreadPool one(1), two(2);
    const Case c{64, 32, 12, 29, attrs(6, 3, 3, 1, 1, 0), true};
    const auto w = randn(size_t(c.c_in * c.c_out * c.k), 3);
    const auto b = randn(size_t(c.c_out), 4);
    const auto x = randn(size_t(c.c_in * c.n), 5);
    nn::ConvTranspose1d conv(w.data(), c.c_in, c.c_out, c.k, b, c.a);
    std::vector<float> y1, y2;
    conv.forward(x.data(), c.n, y1, one);
    conv.forward(x.data(), c.n, y2, two);
    CHECK(y1 == y2);
}

TEST(conv_transpose1d_rejects_bad_shapes) {
    const std::vector<float> w(4 * 2 * 3, 1.0f);
    CHECK_THROWS_AS(nn::ConvTranspose1d(w.data(), 4, 2, 3, {}, attrs(0, 0, 0, 1, 1, 0)),
                    ShapeError);
    CHECK_THROWS_AS(nn::ConvTranspose1d(w.data(), 4, 2, 3, {}, attrs(2, 0, 0, 1, 3, 0)),
                    ShapeError);
    CHECK_THROWS_AS(nn::ConvTranspose1d(w.data(), 4, 2, 3, {}, attrs(2, 0, 0, 1, 1, 2)),
                    ShapeError);
    CHECK_THROWS_AS(nn::ConvTranspose1d(w.data(), 4, 2, 3, {1.0f}, attrs(2, 0, 0, 1, 1, 0)),
                    ShapeError);
    CHECK_THROWS_AS(nn::ConvTranspose1d(w.data(), 4, 2, 3, {}, attrs(1, -1, 0, 1, 1, 0)),
                    ShapeError);
    ThreadPool pool(1);
    nn::ConvTranspose1d conv(w.data(), 4, 2, 3, {}, attrs(1, 2, 2, 1, 1, 0));
    std::vector<float> y;
    const std::vector<float> x(4, 1.0f);
    CHECK_THROWS_AS(conv.forward(x.data(), 1, y, pool), ShapeError);   // 3 - 4 < 1 samples
    CHECK_THROWS_AS(conv.forward(x.data(), 0, y, pool), ShapeError);
}
