// cpu::matmul_f32_blocked (cpu/matmul_f32_blocked.h): every variant gives the generic
// kernel's bits (one summation order: column blocks of kBlockCols, each a chain of fused
// multiply-adds, then the bias, then the activation), whatever the thread count; the product
// matches a double one (with a negative control); the fused GELU equals the activation
// family's vector kernels on the same sums; bad arguments are typed errors.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "compare.h"
#include "core/errors.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "cpu/matmul_f32_blocked.h"
#include "nn/activations.h"

using namespace dasllama;
using cpu::F32Activation;

namespace {

cpu::WeightMatrix f32_weights(const std::vector<float>& w, int64_t rows, int64_t cols) {
    return cpu::prepare_weight(*type_traits("F32"), rows, cols,
                               reinterpret_cast<const uint8_t*>(w.data()), nullptr);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

struct Shape {
    int64_t rows, cols, tokens;
};

// Partial panels (70 = 2 x 32 + 6 rows; 16 and 5 rows: one vector or less), partial column
// blocks (300 = 2 x 128 + 44), token counts off the 12-token tile and past one 48-token task,
// and Whisper's long reduction (1536 -> 384, 100 tokens: three tasks of 48).
constexpr Shape kShapes[] = {{70, 300, 29}, {16, 128, 12}, {5, 7, 1}, {384, 1536, 100}};

}  // namespace

TEST(variants_give_the_generic_bits) {
    const std::vector<std::string> variants = cpu::matmul_f32_blocked_variants();
    CHECK(variants.back() == "generic");
    std::printf("  variants:");
    for (const auto& v : variants) std::printf(" %s", v.c_str());
    std::printf("\n");
    ThreadPool one(1), two(2);
    uint32_t seed = 1;
    for (const Shape& s : kShapes) {
        const auto wv = compare::randn(size_t(s.rows * s.cols), seed++, 0.1f);
        const auto x = compare::randn(size_t(s.tokens * s.cols), seed++);
        const auto bias = compare::randn(size_t(s.rows), seed++);
        const auto w = f32_weights(wv, s.rows, s.cols);
        for (F32Activation act : {F32Activation::kNone, F32Activation::kGeluErf}) {
            for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
                std::vector<float> want(size_t(s.tokens * s.rows));
                cpu::matmul_f32_blocked_with("generic", w, x.data(), s.cols, s.tokens,
                                             want.data(), s.rows, one, b, act);
                for (const auto& v : variants)
                    for (ThreadPool* pool : {&one, &two}) {
                        std::vector<float> got(want.size(), std::nanf(""));
                        cpu::matmul_f32_blocked_with(v, w, x.data(), s.cols, s.tokens,
                                                     got.data(), s.rows, *pool, b, act);
                        if (!same_bits(got, want))
                            std::printf("  differs: %s %lldx%lld x %lld tokens, act %d, bias %d, "
                                        "%d threads\n",
                                        v.c_str(), (long long)s.rows, (long long)s.cols,
                                        (long long)s.tokens, int(act), b != nullptr,
                                        pool->size());
                        CHECK(same_bits(got, want));
                    }
            }
        }
    }
}

TEST(product_matches_double_with_a_control) {
    ThreadPool pool(2);
    const Shape s{384, 1536, 100};
    const auto wv = compare::randn(size_t(s.rows * s.cols), 21, 0.05f);
    const auto x = compare::randn(size_t(s.tokens * s.cols), 22);
    const auto bias = compare::randn(size_t(s.rows), 23);
    const auto w = f32_weights(wv, s.rows, s.cols);
    std::vector<float> y(size_t(s.tokens * s.rows));
    cpu::matmul_f32_blocked(w, x.data(), s.cols, s.tokens, y.data(), s.rows, pool, bias.data());
    std::vector<double> want(y.size()), no_last_block(y.size());
    for (int64_t t = 0; t < s.tokens; ++t)
        for (int64_t r = 0; r < s.rows; ++r) {
            double sum = bias[size_t(r)], partial = bias[size_t(r)];
            for (int64_t c = 0; c < s.cols; ++c) {
                const double p = double(wv[size_t(r * s.cols + c)]) * x[size_t(t * s.cols + c)];
                sum += p;
                if (c < s.cols - cpu::kBlockCols) partial += p;   // a block left out (the bug)
            }
            want[size_t(t * s.rows + r)] = sum;
            no_last_block[size_t(t * s.rows + r)] = partial;
        }
    // Float32 sums of 1536 products: chains of 128, then 12 block additions; measured 1.9e-7.
    const double bar = 4e-7;
    CHECK(compare::within("blocked product vs double", compare::rel_l2(y, want), bar));
    std::vector<float> bad(no_last_block.begin(), no_last_block.end());
    CHECK(compare::bites("control: last column block dropped", compare::rel_l2(bad, want), bar));
}

TEST(fused_gelu_equals_the_activation_kernels) {
    ThreadPool pool(2);
    const Shape s{96, 200, 37};
    const auto wv = compare::randn(size_t(s.rows * s.cols), 31, 0.2f);
    const auto x = compare::randn(size_t(s.tokens * s.cols), 32);
    const auto bias = compare::randn(size_t(s.rows), 33);
    const auto w = f32_weights(wv, s.rows, s.cols);
    std::vector<float> plain(size_t(s.tokens * s.rows)), fused(plain.size());
    cpu::matmul_f32_blocked(w, x.data(), s.cols, s.tokens, plain.data(), s.rows, pool,
                            bias.data());
    cpu::matmul_f32_blocked(w, x.data(), s.cols, s.tokens, fused.data(), s.rows, pool,
                            bias.data(), F32Activation::kGeluErf);
    std::vector<double> exact(plain.size());
    for (size_t i = 0; i < plain.size(); ++i)
        exact[i] = 0.5 * double(plain[i]) * (1.0 + std::erf(double(plain[i]) / std::sqrt(2.0)));
    // The activation family's vector kernels run the same formula: the same bits. Its
    // generic kernel (the C library's erf) agrees within the family's own bar.
    for (const std::string& isa : nn::act::available_variants()) {
        std::vector<float> g = plain;
        nn::act::variant(isa).gelu_erf(g.data(), int64_t(g.size()));
        if (isa != "generic") {
            if (!same_bits(g, fused)) std::printf("  fused GELU differs from %s's\n", isa.c_str());
            CHECK(same_bits(g, fused));
        }
    }
    const double bar = 1e-6;
    CHECK(compare::within("fused GELU vs double erf", compare::rel_l2(fused, exact), bar));
    CHECK(compare::bites("control: GELU left out", compare::rel_l2(plain, exact), bar));
}

TEST(f16_weights_give_the_bits_of_their_f32_widening) {
    ThreadPool pool(2);
    const Shape s{70, 300, 29};
    const auto wv = compare::randn(size_t(s.rows * s.cols), 41, 0.1f);
    std::vector<uint16_t> halves(wv.size());
    std::vector<float> wide(wv.size());
    for (size_t i = 0; i < wv.size(); ++i) {
        halves[i] = f32_to_f16(wv[i]);
        wide[i] = f16_to_f32(halves[i]);
    }
    const auto w16 = cpu::prepare_weight(*type_traits("F16"), s.rows, s.cols,
                                         reinterpret_cast<const uint8_t*>(halves.data()), nullptr);
    const auto w32 = f32_weights(wide, s.rows, s.cols);
    const auto x = compare::randn(size_t(s.tokens * s.cols), 42);
    for (const std::string& v : cpu::matmul_f32_blocked_variants()) {
        std::vector<float> a(size_t(s.tokens * s.rows)), b(a.size());
        cpu::matmul_f32_blocked_with(v, w16, x.data(), s.cols, s.tokens, a.data(), s.rows, pool);
        cpu::matmul_f32_blocked_with(v, w32, x.data(), s.cols, s.tokens, b.data(), s.rows, pool);
        CHECK_MSG(same_bits(a, b), "F16 vs its widening, " + v);
    }
    // control: the unrounded float32 weights give other bits
    const auto w_exact = f32_weights(wv, s.rows, s.cols);
    std::vector<float> a(size_t(s.tokens * s.rows)), b(a.size());
    cpu::matmul_f32_blocked(w16, x.data(), s.cols, s.tokens, a.data(), s.rows, pool);
    cpu::matmul_f32_blocked(w_exact, x.data(), s.cols, s.tokens, b.data(), s.rows, pool);
    CHECK(!same_bits(a, b));
}

TEST(bad_arguments_are_typed_errors) {
    ThreadPool pool(1);
    std::vector<uint8_t> q8(size_t(4 * 34), 0);   // 4 rows of one Q8_0 block
    const auto wq = cpu::prepare_weight(*type_traits("Q8_0"), 4, 32, q8.data(), nullptr);
    std::vector<float> x(32), y(4);
    CHECK_THROWS_AS(cpu::matmul_f32_blocked(wq, x.data(), 32, 1, y.data(), 4, pool), FormatError);
    const std::vector<float> wv(32, 1.0f);
    const auto w = f32_weights(wv, 4, 8);
    CHECK_THROWS_AS(cpu::matmul_f32_blocked(w, x.data(), 8, 1, y.data(), 3, pool), ShapeError);
    CHECK_THROWS_AS(cpu::matmul_f32_blocked(w, x.data(), 8, -1, y.data(), 4, pool), ShapeError);
    CHECK_THROWS_AS(cpu::matmul_f32_blocked_with("no-such-isa", w, x.data(), 8, 1, y.data(), 4,
                                                 pool),
                    Error);
    cpu::WeightMatrix unprepared;
    CHECK_THROWS_AS(cpu::matmul_f32_blocked(unprepared, x.data(), 8, 1, y.data(), 4, pool),
                    ShapeError);
}
