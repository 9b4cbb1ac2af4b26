// The dispatched activations of cpu/ops.h (ELU, GELU in its tanh form) against their
// definitions in double precision, for every variant. The vector variants build them on a
// polynomial exp: the bars hold a few times their measured error, and each has a negative
// control (a plausible bug) that must miss its bar at least tenfold.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "cpu/ops.h"

using namespace dasllama;

namespace {

// Normal values at several scales, and the edges: zeros, tiny and huge magnitudes, and the
// points where the ELU kernels switch between their series and exp(x) - 1.
std::vector<float> inputs() {
    std::mt19937 rng(7);
    std::vector<float> v;
    for (float scale : {1e-4f, 0.1f, 1.0f, 4.0f, 30.0f}) {
        std::normal_distribution<float> d(0.0f, scale);
        for (int i = 0; i < 2001; ++i) v.push_back(d(rng));
    }
    for (float f : {0.0f, -0.0f, 1e-30f, -1e-30f, -0.5f, -0.49999997f, -0.50000006f, 100.0f,
                    -100.0f, 1e6f, -1e6f, -87.0f, -88.0f, 88.0f})
        v.push_back(f);
    return v;
}

double elu_ref(double x) { return x > 0 ? x : std::expm1(x); }
double gelu_ref(double x) {
    return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

struct Error {
    double rel_l2 = 0, max_rel = 0;  // max_rel: the largest |got - want| / scale
};

// scale: the value's own magnitude for ELU (expm1 is well conditioned); the input's for GELU,
// whose tanh form cancels for negative inputs (1 + tanh(u) with tanh near -1) in any float
// evaluation, the C library's included.
enum class Scale { kValue, kInput };

template <class Ref>
Error error_of(const std::vector<float>& x, const std::vector<float>& got, Ref ref,
               Scale scale) {
    double num = 0, den = 0;
    Error e;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = ref(double(x[i])), d = double(got[i]) - want;
        if (std::fabs(x[i]) <= 8.0f) {  // rel-l2 where the functions bend (not their linear tails)
            num += d * d;
            den += want * want;
        }
        const double s = scale == Scale::kValue ? std::fabs(want) : std::fabs(double(x[i]));
        e.max_rel = std::max(e.max_rel, std::fabs(d) / std::max(s, 1e-30));
    }
    e.rel_l2 = std::sqrt(num / den);
    return e;
}

// Bars: relative error per value (every value, tiny ones included) and rel-l2 overall.
constexpr double kMaxRelBar = 5e-7;
constexpr double kRelL2Bar = 1e-7;

bool report(const std::string& what, const Error& e) {
    std::printf("  %-28s rel-l2 %.3e (bar %.0e)  max rel %.3e (bar %.0e)\n", what.c_str(),
                e.rel_l2, kRelL2Bar, e.max_rel, kMaxRelBar);
    return e.rel_l2 <= kRelL2Bar && e.max_rel <= kMaxRelBar;
}

}  // namespace

TEST(elu_and_gelu_match_double_in_every_variant) {
    const std::vector<float> x = inputs();
    const int64_t n = int64_t(x.size());
    for (const std::string& isa : cpu::ops::available_variants()) {
        const cpu::ops::Kernels& k = cpu::ops::variant(isa);
        std::vector<float> y(x.size());
        k.elu(x.data(), y.data(), n);
        CHECK_MSG(report("elu " + isa, error_of(x, y, elu_ref, Scale::kValue)), isa);
        std::vector<float> inplace = x;  // out may equal x
        k.elu(inplace.data(), inplace.data(), n);
        CHECK_MSG(inplace == y, isa);
        std::vector<float> g = x;
        k.gelu_tanh(g.data(), n);
        CHECK_MSG(report("gelu_tanh " + isa, error_of(x, g, gelu_ref, Scale::kInput)), isa);
        // Odd lengths: the tails are computed like the body.
        for (int64_t m : {1, 7, 9, 15}) {
            std::vector<float> part(static_cast<size_t>(m));
            k.elu(x.data(), part.data(), m);
            CHECK_MSG(std::equal(part.begin(), part.end(), y.begin()),
                      isa + " tail " + std::to_string(m));
        }
    }
    // Negative controls: ELU as exp(x) - 1 in float (the cancellation a series avoids) misses
    // the per-value bar on small inputs; GELU with the cubic term dropped misses the rel-l2 bar.
    std::vector<float> bad(x.size());
    for (size_t i = 0; i < x.size(); ++i) bad[i] = x[i] > 0 ? x[i] : std::exp(x[i]) - 1.0f;
    const Error e_elu = error_of(x, bad, elu_ref, Scale::kValue);
    std::printf("  control: elu as exp(x) - 1    max rel %.3e (must be > %.0e)\n", e_elu.max_rel,
                10 * kMaxRelBar);
    CHECK(e_elu.max_rel > 10 * kMaxRelBar);
    for (size_t i = 0; i < x.size(); ++i)
        bad[i] = float(0.5 * x[i] * (1.0 + std::tanh(0.7978845608028654 * x[i])));
    const Error e_gelu = error_of(x, bad, gelu_ref, Scale::kInput);
    std::printf("  control: gelu without x^3     rel-l2 %.3e (must be > %.0e)\n", e_gelu.rel_l2,
                10 * kRelL2Bar);
    CHECK(e_gelu.rel_l2 > 10 * kRelL2Bar);
}

TEST(entry_points_use_a_variant) {
    const std::vector<float> x = inputs();
    std::vector<float> a(x.size()), b = x;
    cpu::elu(x.data(), a.data(), int64_t(x.size()));
    cpu::gelu_tanh(b.data(), int64_t(b.size()));
    CHECK(report("cpu::elu", error_of(x, a, elu_ref, Scale::kValue)));
    CHECK(report("cpu::gelu_tanh", error_of(x, b, gelu_ref, Scale::kInput)));
}
