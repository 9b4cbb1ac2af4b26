// Dot kernels: every variant this CPU can run against the generic one (and against an exact
// double-precision sum), on odd lengths and unaligned rows, with bars from rounding-error
// bounds; a negative control per variant shows each bar bites.
//
// Bars. u = 2^-24 (float unit roundoff), gamma(k) = k u / (1 - k u).
// - f32: any order of summing n products, fused or not, is within gamma(n) * S of the exact
//   value, S = sum |a_i b_i| (Higham, Accuracy and Stability, 2nd ed., sec. 3.1). Two
//   implementations then differ by at most 2 gamma(n) S.
// - q8_0: int8 products are summed exactly (in int32 lanes), so only float rounding remains:
//   the scale product d_a d_b, its product with a lane's integer sum, and the sum of at most
//   nb terms per lane followed by a reduction of at most 16 lanes. Each implementation is
//   within gamma(nb + 8) * S of the exact value, S = sum_blocks |d_a d_b| sum_i |q_a q_b|;
//   two differ by at most 2 gamma(nb + 8) S. With unit scales everything is an integer below
//   2^24, so every variant must return the exact sum.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "core/cpu_features.h"
#include "core/errors.h"
#include "cpu/dot.h"

namespace dot = dasllama::cpu::dot;

namespace {

constexpr double kU = 0x1p-24;
double gamma(int64_t k) { return double(k) * kU / (1.0 - double(k) * kU); }

std::mt19937& rng() {
    static std::mt19937 g;  // each test seeds it, so no test depends on another's draws
    return g;
}

std::vector<float> random_floats(int64_t n) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(size_t(n) + 1);  // +1: rows start at offset 1, unaligned for SIMD
    for (float& x : v) x = u(rng());
    return v;
}

// An f16 bit pattern for a scale in +-[2^-10, 2^0), and its value (decoded here, not by the
// library, so the reference is independent of it).
uint16_t random_scale_bits() {
    std::uniform_int_distribution<int> exp(5, 14), mant(0, 1023), sign(0, 1);
    return uint16_t(sign(rng()) << 15 | exp(rng()) << 10 | mant(rng()));
}
double f16_value(uint16_t h) {
    const double m = 1.0 + (h & 1023) / 1024.0;  // normal numbers only: exponent field 5..15
    return std::ldexp((h >> 15) ? -m : m, ((h >> 10) & 31) - 15);
}

struct Q8Row {
    std::vector<uint8_t> bytes;  // +1 byte in front: rows start at an odd address
    const uint8_t* data() const { return bytes.data() + 1; }
    uint8_t* data() { return bytes.data() + 1; }
};

// nb random blocks: random scales (or `scale_bits` for all), quants over all of int8.
Q8Row random_q8(int64_t nb, int scale_bits = -1) {
    Q8Row r{std::vector<uint8_t>(size_t(nb * dot::kQ8_0Bytes) + 1)};
    std::uniform_int_distribution<int> q(-128, 127);
    for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = r.data() + b * dot::kQ8_0Bytes;
        const uint16_t d = scale_bits < 0 ? random_scale_bits() : uint16_t(scale_bits);
        blk[0] = uint8_t(d & 0xFF);
        blk[1] = uint8_t(d >> 8);
        for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(int8_t(q(rng())));
    }
    return r;
}

struct Exact { double value, abs_sum; };  // the exact result and S of the header

Exact exact_f32(const float* a, const float* b, int64_t n) {
    Exact e{0, 0};
    for (int64_t i = 0; i < n; ++i) {
        const double p = double(a[i]) * double(b[i]);  // exact in double
        e.value += p;
        e.abs_sum += std::fabs(p);
    }
    return e;
}

Exact exact_q8(const uint8_t* a, const uint8_t* b, int64_t nb) {
    Exact e{0, 0};
    for (int64_t k = 0; k < nb; ++k, a += dot::kQ8_0Bytes, b += dot::kQ8_0Bytes) {
        const double d = f16_value(uint16_t(a[0] | a[1] << 8)) *
                         f16_value(uint16_t(b[0] | b[1] << 8));
        int64_t isum = 0, iabs = 0;
        for (int i = 0; i < 32; ++i) {
            const int p = int(int8_t(a[2 + i])) * int(int8_t(b[2 + i]));
            isum += p;
            iabs += p < 0 ? -p : p;
        }
        e.value += d * double(isum);
        e.abs_sum += std::fabs(d) * double(iabs);
    }
    return e;
}

const std::vector<int64_t> kF32Lengths = {0,  1,  2,  3,   7,   8,   15,  16,   17,  31,
                                          33, 63, 64, 65,  100, 127, 129, 255,  1000, 4097};
const std::vector<int64_t> kQ8Blocks = {0, 1, 2, 3, 4, 5, 8, 17, 33, 128};

}  // namespace

TEST(variants_list_the_cpu_levels) {
    const std::vector<std::string> names = dot::available_variants();
    std::printf("  variants:");
    for (const std::string& n : names) std::printf(" %s", n.c_str());
    std::printf(" (active %s)\n", dot::active().isa);
    REQUIRE(!names.empty());
    CHECK(names.back() == "generic");
    CHECK(names.front() == dot::active().isa);
    for (const std::string& n : names) CHECK(dot::variant(n).isa == n);
    CHECK_THROWS_AS(dot::variant("no_such_isa"), dasllama::Error);
    // Each ISA level this process allows has its variant built and listed, so the tests
    // below run it rather than skip it.
    const auto listed = [&](const char* isa) {
        for (const std::string& n : names) if (n == isa) return true;
        return false;
    };
    const dasllama::CpuFeatures& f = dasllama::cpu_features();
#if defined(DASLLAMA_X86)
    CHECK(listed("avx2") == f.allows("avx2"));
    CHECK(listed("avx512") == f.allows("avx512"));
#elif defined(DASLLAMA_ARM64)
    CHECK(listed("neon_dotprod") == f.allows("neon_dotprod"));
#endif
    (void)f;
    (void)listed;
}

TEST(f32_variants_match_generic) {
    rng().seed(1);
    for (const std::string& name : dot::available_variants()) {
        const dot::Kernels& k = dot::variant(name);
        CHECK(k.f32(nullptr, nullptr, 0) == 0.0f);
        double worst = 0;  // largest |variant - generic| / bar seen
        for (int64_t n : kF32Lengths) {
            const std::vector<float> av = random_floats(n), bv = random_floats(n);
            const float* a = av.data() + 1;
            const float* b = bv.data() + 1;
            const Exact e = exact_f32(a, b, n);
            const double v = k.f32(a, b, n), g = dot::f32_generic(a, b, n);
            const double bar = 2 * gamma(n) * e.abs_sum;
            CHECK_MSG(std::fabs(v - g) <= bar, name + " n=" + std::to_string(n));
            CHECK_MSG(std::fabs(v - e.value) <= gamma(n) * e.abs_sum,
                      name + " vs exact, n=" + std::to_string(n));
            if (bar > 0) worst = std::fmax(worst, std::fabs(v - g) / bar);
        }
        std::printf("  f32 %-12s max |v - generic| / bar = %.3g\n", name.c_str(), worst);
    }
}

TEST(f32_negative_control_dropped_tail) {
    // The likeliest SIMD bug: the remainder loop skips the last element.
    // The dropped product is 0.5625; the bar is below 2 gamma(37) * 37 = 1.6e-4.
    const int64_t n = 37;
    rng().seed(6);
    std::vector<float> av = random_floats(n), bv = random_floats(n);
    av[n] = bv[n] = 0.75f;  // last element of the rows (offset 1)
    const float* a = av.data() + 1;
    const float* b = bv.data() + 1;
    const double bar = 2 * gamma(n) * exact_f32(a, b, n).abs_sum;
    for (const std::string& name : dot::available_variants()) {
        const double diff =
            std::fabs(dot::variant(name).f32(a, b, n - 1) - dot::f32_generic(a, b, n));
        std::printf("  f32 %-12s dropped tail: diff / bar = %.3g\n", name.c_str(), diff / bar);
        CHECK(diff > 10 * bar);
    }
}

// f32_rows is f32 row by row, bit for bit, in every variant: at head widths (64), lengths
// with vector and scalar tails, and row counts around the 16- and 8-row blocks. The control
// swaps two rows of the matrix: their sums must trade places (the check sees row order).
TEST(f32_rows_equal_f32_row_by_row) {
    rng().seed(7);
    for (const std::string& name : dot::available_variants()) {
        const dot::Kernels& k = dot::variant(name);
        for (int64_t n : {64, 1, 7, 8, 15, 17, 100, 1500}) {
            for (int64_t n_rows : {1, 7, 8, 16, 17, 33}) {
                const int64_t ld = n + 3;
                const std::vector<float> a = random_floats(n);
                std::vector<float> m = random_floats(ld * n_rows);
                std::vector<float> got(static_cast<size_t>(n_rows));
                k.f32_rows(a.data(), m.data(), ld, n_rows, n, got.data());
                bool same = true;
                for (int64_t j = 0; j < n_rows; ++j) {
                    const float want = k.f32(a.data(), m.data() + j * ld, n);
                    same = same && std::memcmp(&want, &got[size_t(j)], sizeof(float)) == 0;
                }
                CHECK_MSG(same, name + " n=" + std::to_string(n) + " rows=" +
                                    std::to_string(n_rows));
                if (n_rows > 1 && n > 1) {   // control: rows 0 and last swapped
                    for (int64_t c = 0; c < n; ++c)
                        std::swap(m[size_t(c)], m[size_t((n_rows - 1) * ld + c)]);
                    std::vector<float> swapped(static_cast<size_t>(n_rows));
                    k.f32_rows(a.data(), m.data(), ld, n_rows, n, swapped.data());
                    CHECK(swapped[0] == got[size_t(n_rows - 1)] &&
                          swapped[size_t(n_rows - 1)] == got[0] && got[0] != swapped[0]);
                }
            }
        }
    }
    std::vector<float> out(1);
    CHECK_THROWS_AS(dasllama::cpu::dot_f32_rows(nullptr, nullptr, 4, 1, 8, out.data()),
                    dasllama::ShapeError);
}

TEST(q8_0_variants_match_generic) {
    rng().seed(2);
    for (const std::string& name : dot::available_variants()) {
        const dot::Kernels& k = dot::variant(name);
        CHECK(k.q8_0(nullptr, nullptr, 0) == 0.0f);
        double worst = 0;
        for (int64_t nb : kQ8Blocks) {
            const Q8Row a = random_q8(nb), b = random_q8(nb);
            const Exact e = exact_q8(a.data(), b.data(), nb);
            const int64_t n = nb * dot::kQ8_0Block;
            const double v = k.q8_0(a.data(), b.data(), n);
            const double g = dot::q8_0_generic(a.data(), b.data(), n);
            const double bar = 2 * gamma(nb + 8) * e.abs_sum;
            CHECK_MSG(std::fabs(v - g) <= bar, name + " nb=" + std::to_string(nb));
            CHECK_MSG(std::fabs(v - e.value) <= gamma(nb + 8) * e.abs_sum,
                      name + " vs exact, nb=" + std::to_string(nb));
            if (bar > 0) worst = std::fmax(worst, std::fabs(v - g) / bar);
        }
        std::printf("  q8_0 %-11s max |v - generic| / bar = %.3g\n", name.c_str(), worst);
    }
}

TEST(q8_0_integer_sums_are_exact) {
    rng().seed(3);
    // Unit scales (f16 0x3C00): results are integers below 2^24, so no rounding anywhere.
    for (const std::string& name : dot::available_variants()) {
        const dot::Kernels& k = dot::variant(name);
        for (int64_t nb : {1, 2, 3, 5, 16}) {
            const Q8Row a = random_q8(nb, 0x3C00), b = random_q8(nb, 0x3C00);
            const double want = exact_q8(a.data(), b.data(), nb).value;
            CHECK_MSG(k.q8_0(a.data(), b.data(), nb * 32) == want,
                      name + " nb=" + std::to_string(nb));
        }
        // -128 everywhere: (-128)(-128) breaks the |a| * sign(b, a) shortcut.
        Q8Row a = random_q8(3, 0x3C00), b = random_q8(3, 0x3C00);
        for (int64_t blk = 0; blk < 3; ++blk)
            for (int i = 0; i < 32; ++i)
                a.data()[blk * 34 + 2 + i] = b.data()[blk * 34 + 2 + i] = 0x80;
        CHECK_MSG(k.q8_0(a.data(), b.data(), 96) == 3 * 32 * 16384.0f, name + " all -128");
        for (int i = 0; i < 32; ++i) b.data()[2 + i] = 127;  // block 0: -128 * 127
        CHECK_MSG(k.q8_0(a.data(), b.data(), 96) == 2 * 32 * 16384.0f - 32 * 16256.0f,
                  name + " -128 * 127");
    }
}

TEST(q8_0_negative_control_one_quant_off_by_one) {
    // A one-step error in one product (a saturating or wrapping int8 step), last block.
    // Equal scales 2^-7 and a partner quant of 100 make the bite certain: the error is
    // 2^-14 * 100, while S <= 2^-14 * 5 * 32 * 2^14 bounds the bar below 2^-14 * 4.1.
    const int64_t nb = 5;
    rng().seed(7);
    Q8Row a = random_q8(nb, 0x2000), b = random_q8(nb, 0x2000);
    const int64_t at = (nb - 1) * dot::kQ8_0Bytes + 2 + 31;
    a.data()[at] = uint8_t(int8_t(-3));
    b.data()[at] = 100;
    Q8Row bad = a;
    bad.data()[at] = uint8_t(int8_t(-2));
    const double bar = 2 * gamma(nb + 8) * exact_q8(a.data(), b.data(), nb).abs_sum;
    for (const std::string& name : dot::available_variants()) {
        const double diff = std::fabs(dot::variant(name).q8_0(bad.data(), b.data(), nb * 32) -
                                      dot::q8_0_generic(a.data(), b.data(), nb * 32));
        std::printf("  q8_0 %-11s off-by-one quant: diff / bar = %.3g\n", name.c_str(), diff / bar);
        CHECK(diff > 10 * bar);
    }
}

TEST(entry_points_dispatch_and_check) {
    rng().seed(4);
    const std::vector<float> av = random_floats(100), bv = random_floats(100);
    CHECK(dasllama::cpu::dot_f32(av.data(), bv.data(), 100) ==
          dot::active().f32(av.data(), bv.data(), 100));
    CHECK(dasllama::cpu::dot_f32(nullptr, nullptr, 0) == 0.0f);
    CHECK_THROWS_AS(dasllama::cpu::dot_f32(av.data(), bv.data(), -1), dasllama::ShapeError);

    const Q8Row a = random_q8(4), b = random_q8(4);
    CHECK(dasllama::cpu::dot_q8_0(a.data(), b.data(), 128) ==
          dot::active().q8_0(a.data(), b.data(), 128));
    CHECK_THROWS_AS(dasllama::cpu::dot_q8_0(a.data(), b.data(), 33), dasllama::FormatError);
    CHECK_THROWS_AS(dasllama::cpu::dot_q8_0(a.data(), b.data(), -32), dasllama::FormatError);
}
