// csrc/nn/snake: every kernel variant against snake(x) = x + sin(alpha x)^2 / alpha in double,
// over the argument range iSTFTNet's blocks meet (|alpha x| up to ~200) and past the vector
// reduction's limit (the scalar fallback), with a negative control (alpha instead of 1/alpha).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "core/thread_pool.h"
#include "nn/snake.h"

using namespace dasllama;

// Bar on the added term sin(alpha x)^2 / alpha (rel-l2 over the ordinary arguments): a few
// times the error measured on x86-64 (sinf or the vector sine against double, then float32
// roundings). The two huge arguments are checked on the output, within a float32 ulp of x.
constexpr double kBarRel = 3e-7;
constexpr int64_t kHuge0 = 17, kHuge1 = 18;   // indices of the arguments past the limit

namespace {

// rel-l2 of the added terms (got - x against want - x), the huge arguments left out.
double term_rel_l2(const std::vector<float>& got, const std::vector<double>& want,
                   const std::vector<float>& x) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        if (i == size_t(kHuge0) || i == size_t(kHuge1)) continue;
        const double g = double(got[i]) - double(x[i]), w = want[i] - double(x[i]);
        num += (g - w) * (g - w);
        den += w * w;
    }
    return std::sqrt(num / den);
}

}  // namespace

TEST(snake_variants_match_double) {
    const int64_t C = 5, L = 1003;   // not a multiple of 8: the tails run too
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> x(size_t(C * L));
    for (float& v : x) v = d(rng);
    x[kHuge0] = 2.0e5f;                // past the vector reduction's limit
    x[kHuge1] = -3.0e5f;
    const std::vector<float> alpha = {0.3f, 1.0f, 7.5f, 25.0f, 0.05f};
    std::vector<double> want(x.size()), control(x.size());
    for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < L; ++i) {
            const double v = x[size_t(c * L + i)], a = alpha[size_t(c)];
            const double s = std::sin(double(float(a * v)));   // the float32 product
            want[size_t(c * L + i)] = v + s * s / a;
            control[size_t(c * L + i)] = v + s * s * a;
        }
    for (const std::string& isa : nn::snake_kernels::available_variants()) {
        const auto& k = nn::snake_kernels::variant(isa);
        std::vector<float> y = x;
        for (int64_t c = 0; c < C; ++c)
            k.row(y.data() + c * L, L, alpha[size_t(c)], 1.0f / alpha[size_t(c)]);
        const double err = term_rel_l2(y, want, x), ctl = term_rel_l2(y, control, x);
        std::printf("  %-8s term rel-l2 %.2e (bar %.0e); control (times alpha) %.2e\n",
                    isa.c_str(), err, kBarRel, ctl);
        CHECK(err <= kBarRel);
        CHECK(ctl > 10 * kBarRel);
        for (int64_t i : {kHuge0, kHuge1})
            CHECK(std::fabs(double(y[size_t(i)]) - want[size_t(i)]) <=
                  std::fabs(double(x[size_t(i)])) * 1.2e-7);
    }
    // The pooled entry point equals the active row kernel.
    ThreadPool pool(2);
    std::vector<float> y = x, z = x;
    nn::snake(y.data(), C, L, alpha.data(), pool);
    const auto& k = nn::snake_kernels::active();
    for (int64_t c = 0; c < C; ++c) k.row(z.data() + c * L, L, alpha[size_t(c)], 1.0f / alpha[size_t(c)]);
    CHECK(y == z);
}
