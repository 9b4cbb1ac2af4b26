// What the float-kernel tests share: seeded normal inputs, the relative l2 error against a
// double-precision reference, and the two verdicts every comparison prints: within its bar,
// and (a negative control) a plausible bug's error at least ten times the bar.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace compare {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

// ||got - want|| / ||want|| over want's length.
inline double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

inline bool within(const char* what, double err, double bar) {
    std::printf("  %-44s rel-l2 %.3e  (bar %.1e)\n", what, err, bar);
    return err <= bar;
}

inline bool bites(const char* what, double err, double bar) {
    std::printf("  %-44s rel-l2 %.3e  (must be > %.1e)\n", what, err, 10 * bar);
    return err > 10 * bar;
}

}  // namespace compare
