// Matmul: every weight type x every kernel variant x token counts x odd shapes, against a
// double-precision product of the dequantized weights.
//
// kFast is checked against the product with the *quantized* activations (the values its int8
// blocks stand for), so only float rounding and summation order differ: tight bar. Its
// distance to the true float32 product is the activation rounding itself: a loose bar,
// printed. kF32 is checked against the true product. Each bar has a negative control that
// must miss it by 10x or more.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "core/errors.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "cpu/kernels_matmul.h"
#include "cpu/matmul.h"

using namespace dasllama;
using cpu::Precision;

namespace {

// Bars. The two float-summation bars are l2 errors relative to the l2 norm of the terms'
// magnitudes sum |w x| (rounding scales with them, not with a result that cancels); the
// activation-rounding bar is plain rel-l2 on model-like weights. Measured worst cases are
// printed by the test; the bars leave a few times that.
constexpr double kTightBar = 2e-7;  // kFast vs product of quantized activations (float sums)
constexpr double kF32Bar = 2e-7;    // kF32 vs true product
constexpr double kFastBar = 2e-2;   // kFast vs true product (activation rounding)

// Where a block keeps its f16 scales (byte offsets), so random blocks get sane ones.
struct ScaleFields {
    const char* type;
    std::vector<int> f16_offsets;
};
const ScaleFields kScaleFields[] = {
    {"Q4_0", {0}},      {"Q4_1", {0, 2}},  {"Q5_0", {0}},   {"Q5_1", {0, 2}},
    {"Q8_0", {0}},      {"Q4_K", {0, 2}},  {"Q5_K", {0, 2}}, {"Q6_K", {208}},
    {"Q2_K", {80, 82}}, {"Q3_K", {108}},   {"IQ4_NL", {0}}, {"IQ4_XS", {0}},
};

const char* kTypes[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K",
                        "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "F16", "BF16", "F32"};

// Random rows of a type. `realistic`: quantized from normal floats (weights centred on zero,
// as in a model) where the type has a quantizer. Otherwise random bytes with every f16 scale
// replaced by a small positive value, so every level pattern (Q8_0's -128 included) occurs;
// their weights need not be centred (random mins), so products can cancel and relative
// errors grow: only the tight bar, whose reference shares the cancellation, is held there.
std::vector<uint8_t> random_rows(const TypeTraits& t, int64_t rows, int64_t cols,
                                 std::mt19937& rng, bool realistic = false) {
    const int64_t rb = row_bytes(t, cols);
    std::vector<uint8_t> data(static_cast<size_t>(rb * rows));
    const ScaleFields* fields = nullptr;
    for (const ScaleFields& f : kScaleFields)
        if (std::string(f.type) == t.name) fields = &f;
    if (!fields || (realistic && t.quantize)) {
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> v(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            for (float& x : v) x = normal(rng);
            quantize(t, v.data(), data.data() + r * rb, cols);
        }
        return data;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.002f, 0.02f);
    for (uint8_t& b : data) b = static_cast<uint8_t>(byte(rng));
    for (int64_t blk = 0; blk < rows * cols / t.block_size; ++blk)
        for (int off : fields->f16_offsets) {
            const uint16_t h = f32_to_f16(scale(rng));
            data[blk * t.type_size + off] = static_cast<uint8_t>(h);
            data[blk * t.type_size + off + 1] = static_cast<uint8_t>(h >> 8);
        }
    return data;
}

std::vector<float> random_activations(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    return x;
}

// Y = X W^T in double, W from dequantize, and the magnitude of its terms sum |w x| (the scale
// of any float summation error). `drop_tail` columns left out is the negative control's bug.
struct Product {
    std::vector<double> y, magnitude;
};

Product reference(const cpu::WeightMatrix& w, const std::vector<float>& x, int64_t n_tokens,
                  int64_t drop_tail = 0) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    Product p;
    p.y.resize(static_cast<size_t>(n_tokens * w.rows));
    p.magnitude.resize(p.y.size());
    for (int64_t r = 0; r < w.rows; ++r) {
        dequantize(*w.type, w.data + r * w.row_bytes, row.data(), w.cols);
        for (int64_t t = 0; t < n_tokens; ++t) {
            double s = 0, m = 0;
            for (int64_t c = 0; c < w.cols - drop_tail; ++c) {
                const double term = double(row[c]) * double(x[t * w.cols + c]);
                s += term;
                m += std::fabs(term);
            }
            p.y[t * w.rows + r] = s;
            p.magnitude[t * w.rows + r] = m;
        }
    }
    return p;
}

// ||y - ref|| / ||scale||: rel-l2 when scale is the reference itself; against the terms'
// magnitude it measures summation error without blowing up where a product cancels.
template <class V>
double rel_l2(const V& y, const std::vector<double>& ref, const std::vector<double>& scale) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        num += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
        den += scale[i] * scale[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Columns for a type: a single group, a partial last group, full groups only.
std::vector<int64_t> test_cols(const TypeTraits& t) {
    if (t.block_size == 256) return {256, 768, 1280};
    // 1 block; 16 + 2 (a 4-block tail group); 16 + 4; 16 + 7 (8-block tail); 16 + 9 (partial
    // 16-block tail).
    return {32, 576, 640, 736, 800};
}

struct Worst {
    double tight = 0, fast = 0, f32 = 0, control = 1e30, fast_control = 1e30;
};

}  // namespace

TEST(get_row_and_packing_equal_dequantize) {
    std::mt19937 rng(1);
    for (const char* name : kTypes) {
        const TypeTraits* t = type_traits(name);
        REQUIRE(t);
        for (int64_t cols : test_cols(*t)) {
            const int64_t rows = 5;
            auto data = random_rows(*t, rows, cols, rng);
            auto w = cpu::prepare_weight(*t, rows, cols, data.data(), nullptr);
            std::vector<float> a(cols), b(cols), c(cols);
            bool same = true;
            for (int64_t r = 0; r < rows; ++r) {
                cpu::get_row(w, r, a.data());
                dequantize(*t, data.data() + r * w.row_bytes, b.data(), cols);
                same = same && std::memcmp(a.data(), b.data(), cols * 4) == 0;
                if (w.packed_kind >= 0) {
                    cpu::mm::unpack_row(static_cast<cpu::mm::PackKind>(w.packed_kind),
                                        w.packed + r * w.packed_row_bytes, cols, c.data());
                    same = same && std::memcmp(c.data(), b.data(), cols * 4) == 0;
                }
            }
            CHECK_MSG(same, std::string(name) + " cols " + std::to_string(cols));
        }
    }
}

TEST(every_type_variant_and_shape) {
    std::mt19937 rng(2);
    ThreadPool pool(3);  // an odd count: uneven splits
    const auto variants = cpu::matmul_variants();
    std::printf("variants:");
    for (const auto& v : variants) std::printf(" %s", v.c_str());
    std::printf("\n");
    for (const char* name : kTypes) {
        const TypeTraits* t = type_traits(name);
        Worst worst;
        for (int64_t cols : test_cols(*t)) {
            for (int64_t rows : {1, 37, 67}) {
                // 37 rows: model-like weights; 1 and 67: random bit patterns.
                const bool realistic = rows == 37 || !t->quantize;
                auto data = random_rows(*t, rows, cols, rng, realistic);
                auto w = cpu::prepare_weight(*t, rows, cols, data.data(), nullptr);
                for (int64_t n_tokens : {1, 3, 17, 64}) {
                    auto x = random_activations(n_tokens * cols, rng);
                    const auto xq = cpu::quantized_activations(w, x.data(), n_tokens);
                    const Product ref_q = reference(w, xq, n_tokens);
                    const Product ref = reference(w, x, n_tokens);
                    std::vector<float> y(static_cast<size_t>(n_tokens * rows));
                    for (const auto& v : variants) {
                        std::fill(y.begin(), y.end(), NAN);
                        cpu::matmul_with(v, w, x.data(), n_tokens, y.data(), pool);
                        const double e_tight = rel_l2(y, ref_q.y, ref_q.magnitude),
                                     e_fast = rel_l2(y, ref.y, ref.y);
                        CHECK_MSG(e_tight < kTightBar, std::string(name) + "/" + v + " cols " +
                                  std::to_string(cols) + " rows " + std::to_string(rows) +
                                  " tokens " + std::to_string(n_tokens) + ": " +
                                  std::to_string(e_tight));
                        worst.tight = std::max(worst.tight, e_tight);
                        if (realistic) {
                            worst.fast = std::max(worst.fast, e_fast);
                            CHECK_MSG(e_fast < kFastBar, std::string(name) + "/" + v + ": " +
                                      std::to_string(e_fast));
                        }

                        std::fill(y.begin(), y.end(), NAN);
                        cpu::matmul_with(v, w, x.data(), n_tokens, y.data(), pool,
                                         Precision::kF32);
                        const double e32 = rel_l2(y, ref.y, ref.magnitude);
                        if (!realistic) continue;
                        worst.f32 = std::max(worst.f32, e32);
                        CHECK_MSG(e32 < kF32Bar, std::string(name) + "/" + v + " f32: " +
                                  std::to_string(e32));
                    }
                    // Negative controls: dropping the last block of every row must miss the
                    // tight bar by 10x; so must the true product against the tight bar for
                    // the integer kinds (the bar can tell rounded activations apart).
                    if (cols > 32) {
                        const Product bug = reference(w, xq, n_tokens, 32);
                        worst.control = std::min(worst.control,
                                                 rel_l2(bug.y, ref_q.y, ref_q.magnitude));
                    }
                    if (w.packed_kind >= 0)
                        worst.fast_control = std::min(
                            worst.fast_control, rel_l2(ref.y, ref_q.y, ref_q.magnitude));
                }
            }
        }
        std::printf("%-7s kFast vs quantized-x product %.2e (bar %.0e); kFast vs f32 %.2e "
                    "(bar %.0e); kF32 %.2e (bar %.0e); controls: last 32 columns dropped "
                    "%.2e, unrounded x %.2e\n",
                    name, worst.tight, kTightBar, worst.fast, kFastBar, worst.f32, kF32Bar,
                    worst.control, worst.fast_control);
        CHECK(worst.control > 10 * kTightBar);
        if (cpu::mm::pack_kind_of(static_cast<uint32_t>(t->type)) >= 0)
            CHECK_MSG(worst.fast_control > 10 * kTightBar, std::to_string(worst.fast_control));
    }
}

// Every variant quantizes activations to the same bytes as the generic kernel (the tight bar
// above compares against the generic rounding).
TEST(activation_bytes_equal_generic) {
    std::mt19937 rng(4);
    std::vector<const cpu::mm::Kernels*> tables;
    for (const auto& v : cpu::matmul_variants()) {
#if defined(DASLLAMA_X86)
        if (v == "avx512") tables.push_back(cpu::mm::kernels_avx512());
        if (v == "avx2") tables.push_back(cpu::mm::kernels_avx2());
#endif
    }
    for (int kind = 0; kind < cpu::mm::kPackKinds; ++kind) {
        const auto k = static_cast<cpu::mm::PackKind>(kind);
        for (int64_t cols : {256, 768, 1280}) {
            auto x = random_activations(cols, rng);
            const size_t n = static_cast<size_t>(cpu::mm::act_row_bytes(cpu::mm::kFormats[k], cols));
            std::vector<uint8_t> want(n), got(n);
            cpu::mm::quantize_act_generic(k, x.data(), cols, want.data());
            for (const auto* t : tables) {
                if (!t) continue;
                std::fill(got.begin(), got.end(), 0xAB);
                t->quantize_act(k, x.data(), cols, got.data());
                CHECK_MSG(got == want, std::string(t->isa) + " " + cpu::mm::kFormats[k].name);
            }
        }
    }
}

TEST(single_thread_pool_and_zero_tokens) {
    std::mt19937 rng(3);
    ThreadPool pool(1);
    const TypeTraits* t = type_traits("Q4_1");
    auto data = random_rows(*t, 9, 64, rng);
    auto w = cpu::prepare_weight(*t, 9, 64, data.data(), nullptr);
    auto x = random_activations(2 * 64, rng);
    std::vector<float> y(18, NAN);
    cpu::matmul(w, x.data(), 0, y.data(), pool);
    CHECK(std::isnan(y[0]));  // nothing written
    cpu::matmul(w, x.data(), 2, y.data(), pool);
    const Product ref = reference(w, cpu::quantized_activations(w, x.data(), 2), 2);
    CHECK(rel_l2(y, ref.y, ref.magnitude) < kTightBar);
}

TEST(errors_name_the_fault) {
    const TypeTraits* t = type_traits("Q4_0");
    std::vector<uint8_t> data(18 * 4);
    CHECK_THROWS_AS(cpu::prepare_weight(*t, 2, 48, data.data(), nullptr), FormatError);
    CHECK_THROWS_AS(cpu::prepare_weight(*t, -1, 32, data.data(), nullptr), ShapeError);
    auto w = cpu::prepare_weight(*t, 2, 64, data.data(), nullptr);
    std::vector<float> out(64);
    CHECK_THROWS_AS(cpu::get_row(w, 2, out.data()), ShapeError);
    CHECK_THROWS_AS(cpu::get_row(w, -1, out.data()), ShapeError);
    ThreadPool pool(1);
    CHECK_THROWS_AS(cpu::matmul(w, out.data(), -1, out.data(), pool), ShapeError);
    CHECK_THROWS_AS(cpu::matmul_with("no-such-isa", w, out.data(), 1, out.data(), pool), Error);
    cpu::WeightMatrix empty;
    CHECK_THROWS_AS(cpu::matmul(empty, out.data(), 1, out.data(), pool), ShapeError);
}

// One job over several matrices with the same input (a decode step's q/k/v) gives exactly what
// separate matmul calls give: same kernels, same activation bytes. Mixed packed kinds (each
// quantizes x its own way), a float-path type (falls back to separate calls), row counts that
// split unevenly, one and two tokens (two takes the plain path), 1 and 2 threads.
// Negative control: the same comparison against a matrix that differs in one row must fail.
TEST(shared_input_equals_separate_calls) {
    std::mt19937 rng(5);
    const int64_t cols = 768;  // a multiple of every block size
    struct Spec {
        const char* type;
        int64_t rows;
    };
    const Spec specs[] = {{"Q5_0", 1024}, {"Q5_0", 256}, {"Q8_0", 37}, {"Q6_K", 70}, {"F16", 5}};
    std::vector<std::vector<uint8_t>> data;
    std::vector<cpu::WeightMatrix> ws;
    for (const Spec& s : specs) {
        const TypeTraits* t = type_traits(s.type);
        data.push_back(random_rows(*t, s.rows, cols, rng, true));
        ws.push_back(cpu::prepare_weight(*t, s.rows, cols, data.back().data(), nullptr));
    }
    for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int64_t n_tokens : {1, 2}) {
            for (int n : {1, 3, 5}) {  // the first n matrices (5 includes the F16 one)
                const auto x = random_activations(n_tokens * cols, rng);
                std::vector<std::vector<float>> shared(static_cast<size_t>(n)), separate(shared);
                std::vector<cpu::MatmulTarget> targets;
                for (int i = 0; i < n; ++i) {
                    shared[i].assign(static_cast<size_t>(n_tokens * ws[i].rows), NAN);
                    separate[i].resize(shared[i].size());
                    targets.push_back({&ws[i], shared[i].data()});
                    cpu::matmul(ws[i], x.data(), n_tokens, separate[i].data(), pool);
                }
                cpu::matmul_shared_input(targets.data(), n, x.data(), n_tokens, pool);
                for (int i = 0; i < n; ++i)
                    CHECK_MSG(std::memcmp(shared[i].data(), separate[i].data(),
                                          shared[i].size() * sizeof(float)) == 0,
                              std::string(specs[i].type) + " threads " + std::to_string(threads) +
                                  " tokens " + std::to_string(n_tokens) + " targets " +
                                  std::to_string(n));
            }
        }
    }
    // Negative control: one changed row of the first matrix must show up.
    ThreadPool pool(2);
    std::vector<uint8_t> changed = data[0];
    const int64_t rb = row_bytes(*type_traits("Q5_0"), cols);
    for (int64_t b = 2; b < rb; ++b) changed[size_t(500 * rb + b)] ^= 0x11;
    const auto w2 = cpu::prepare_weight(*type_traits("Q5_0"), 1024, cols, changed.data(), nullptr);
    const auto x = random_activations(cols, rng);
    std::vector<float> a(1024), b(1024);
    cpu::matmul(ws[0], x.data(), 1, a.data(), pool);
    const cpu::MatmulTarget one{&w2, b.data()};
    cpu::matmul_shared_input(&one, 1, x.data(), 1, pool);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0);
}

// A product below the inline knee (cpu/matmul.cpp kInlineMacs, 65536 multiply-adds) runs on
// the calling thread without a pool job; a larger one wakes the pool. Both paths give the
// results a one-thread pool gives, bit for bit.
TEST(small_products_run_on_the_caller) {
    std::mt19937 rng(5);
    ThreadPool pool(2), one(1);
    for (const char* name : {"F32", "Q8_0"}) {
        const TypeTraits* t = type_traits(name);
        for (int64_t rows : {int64_t(1024), int64_t(4096)}) {  // 1024 x 32 = 32768: inline
            const int64_t cols = 32;
            auto data = random_rows(*t, rows, cols, rng);
            auto w = cpu::prepare_weight(*t, rows, cols, data.data(), nullptr);
            auto x = random_activations(cols, rng);
            for (Precision p : {Precision::kF32, Precision::kFast}) {
                std::vector<float> y(size_t(rows), NAN), y1(size_t(rows), NAN);
                const int64_t jobs0 = pool.jobs_run();
                cpu::matmul(w, x.data(), 1, y.data(), pool, p);
                const int64_t jobs = pool.jobs_run() - jobs0;
                CHECK_MSG(jobs == (rows * cols < 65536 ? 0 : 1),
                          std::string(name) + " rows " + std::to_string(rows) + ": " +
                              std::to_string(jobs) + " jobs");
                cpu::matmul(w, x.data(), 1, y1.data(), one, p);
                CHECK(std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)) == 0);
            }
        }
    }
}
