// The float matmul path (Precision::kF32) beyond test_matmul.cpp's accuracy checks (which
// cover every type, variant and token count): the ways of reaching it must agree bit for bit.
//
// - A token's outputs do not depend on the tokens sharing its call (decode equals prefill):
//   one token's row kernels, the tiles, Q8_0 widened in registers or dequantized first, all
//   keep one summation order.
// - Several matrices over one input in one pool job equal separate calls.
// - An F16 matrix (rows widened 16 at a time by each variant's dequantize_f16) equals its
//   values widened to an F32 matrix once, for one token and for many.
// - Overlapping activation rows (matmul_f32_strided: a convolution's windows read in place)
//   equal the same windows copied out (im2col), and both match a double product.
// The comparison against the double product has a negative control that must miss its bar.
#include <algorithm>
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
#include "cpu/matmul.h"

using namespace dasllama;
using cpu::Precision;

namespace {

std::vector<float> normals(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng);
    return v;
}

// rows x cols of `type`, quantized from normal values (F32: the values themselves).
std::vector<uint8_t> weights(const char* type, int64_t rows, int64_t cols, std::mt19937& rng) {
    const TypeTraits& t = *type_traits(type);
    const std::vector<float> v = normals(rows * cols, rng);
    std::vector<uint8_t> out(static_cast<size_t>(row_bytes(t, cols) * rows));
    quantize(t, v.data(), out.data(), rows * cols);
    return out;
}

bool same_bits(const std::vector<float>& a, const float* b) {
    return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(a_token_does_not_depend_on_its_batch) {
    std::mt19937 rng(11);
    ThreadPool pool(2);
    for (const char* type : {"Q8_0", "F32", "F16"}) {
        // 70 rows: remainders of every row tile; 600 columns: a partial 32-column group.
        const int64_t rows = 70, cols = std::string(type) == "Q8_0" ? 608 : 600;
        const auto data = weights(type, rows, cols, rng);
        const auto w = cpu::prepare_weight(*type_traits(type), rows, cols, data.data(), nullptr);
        const auto x = normals(21 * cols, rng);
        for (const std::string& v : cpu::matmul_variants()) {
            std::vector<float> batch(static_cast<size_t>(21 * rows));
            cpu::matmul_with(v, w, x.data(), 21, batch.data(), pool, Precision::kF32);
            bool same = true;
            for (int64_t n : {1, 2, 3, 4, 5}) {  // tokens 0..n-1 alone
                std::vector<float> few(static_cast<size_t>(n * rows));
                cpu::matmul_with(v, w, x.data(), n, few.data(), pool, Precision::kF32);
                same = same && same_bits(few, batch.data());
            }
            CHECK_MSG(same, std::string(type) + "/" + v);
        }
    }
    // Negative control: one changed activation of token 0 changes its outputs.
    const auto data = weights("Q8_0", 8, 64, rng);
    const auto w = cpu::prepare_weight(*type_traits("Q8_0"), 8, 64, data.data(), nullptr);
    auto x = normals(64, rng);
    std::vector<float> a(8), b(8);
    cpu::matmul(w, x.data(), 1, a.data(), pool, Precision::kF32);
    x[63] += 1.0f;
    cpu::matmul(w, x.data(), 1, b.data(), pool, Precision::kF32);
    CHECK(!same_bits(a, b.data()));
}

TEST(f16_rows_equal_their_f32_widening) {
    std::mt19937 rng(13);
    ThreadPool pool(2);
    const int64_t rows = 70, cols = 600;   // a partial vector at every row's end (600 % 16 = 8)
    const auto data = weights("F16", rows, cols, rng);
    std::vector<float> wide(static_cast<size_t>(rows * cols));
    dequantize(*type_traits("F16"), data.data(), wide.data(), rows * cols);
    const auto w16 = cpu::prepare_weight(*type_traits("F16"), rows, cols, data.data(), nullptr);
    const auto w32 = cpu::prepare_weight(*type_traits("F32"), rows, cols,
                                         reinterpret_cast<const uint8_t*>(wide.data()), nullptr);
    const auto x = normals(9 * cols, rng);
    for (const std::string& v : cpu::matmul_variants())
        for (int64_t n : {1, 9}) {
            std::vector<float> a(static_cast<size_t>(n * rows)), b(a.size());
            cpu::matmul_with(v, w16, x.data(), n, a.data(), pool, Precision::kF32);
            cpu::matmul_with(v, w32, x.data(), n, b.data(), pool, Precision::kF32);
            CHECK_MSG(same_bits(a, b.data()), "F16/" + v + ", " + std::to_string(n) + " tokens");
        }
    // Negative control: one weight's last bit flipped changes its row's output.
    auto other = data;
    other[0] ^= 1;
    const auto w16b = cpu::prepare_weight(*type_traits("F16"), rows, cols, other.data(), nullptr);
    std::vector<float> a(static_cast<size_t>(rows)), b(a.size());
    cpu::matmul(w16, x.data(), 1, a.data(), pool, Precision::kF32);
    cpu::matmul(w16b, x.data(), 1, b.data(), pool, Precision::kF32);
    CHECK(!same_bits(a, b.data()));
}

TEST(shared_input_equals_separate_calls_in_f32) {
    std::mt19937 rng(12);
    const int64_t cols = 512;
    const char* types[] = {"Q8_0", "F32", "F16", "Q8_0"};
    const int64_t rows[] = {1536, 37, 70, 512};
    std::vector<std::vector<uint8_t>> data;
    std::vector<cpu::WeightMatrix> ws;
    for (int i = 0; i < 4; ++i) {
        data.push_back(weights(types[i], rows[i], cols, rng));
        ws.push_back(cpu::prepare_weight(*type_traits(types[i]), rows[i], cols, data.back().data(),
                                         nullptr));
    }
    const auto x = normals(cols, rng);
    for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<std::vector<float>> shared(4);
        std::vector<cpu::MatmulTarget> targets;
        for (int i = 0; i < 4; ++i) {
            shared[i].assign(static_cast<size_t>(rows[i]), NAN);
            targets.push_back({&ws[i], shared[i].data()});
        }
        cpu::matmul_shared_input(targets.data(), 4, x.data(), 1, pool, Precision::kF32);
        for (int i = 0; i < 4; ++i) {
            std::vector<float> alone(static_cast<size_t>(rows[i]));
            cpu::matmul(ws[i], x.data(), 1, alone.data(), pool, Precision::kF32);
            CHECK_MSG(same_bits(alone, shared[i].data()),
                      std::string(types[i]) + " threads " + std::to_string(threads));
        }
    }
}

TEST(overlapping_windows_equal_im2col) {
    std::mt19937 rng(13);
    ThreadPool pool(2);
    // A convolution over time-major rows [T, cin] with kernel k: window t = rows t..t+k-1.
    const int64_t cin = 40, cout = 23, k = 3, T = 50, n_out = T - k + 1;
    const auto data = weights("F32", cout, k * cin, rng);
    const auto w = cpu::prepare_weight(*type_traits("F32"), cout, k * cin, data.data(), nullptr);
    const auto signal = normals(T * cin, rng);
    std::vector<float> cols(static_cast<size_t>(n_out * k * cin));
    for (int64_t t = 0; t < n_out; ++t)
        std::memcpy(cols.data() + t * k * cin, signal.data() + t * cin, k * cin * sizeof(float));
    std::vector<float> copied(static_cast<size_t>(n_out * cout)), in_place(copied.size());
    cpu::matmul(w, cols.data(), n_out, copied.data(), pool, Precision::kF32);
    cpu::matmul_f32_strided(w, signal.data(), cin, n_out, in_place.data(), pool);
    CHECK(same_bits(copied, in_place.data()));
    // Both against a double product, relative to the terms' magnitude.
    const float* wf = reinterpret_cast<const float*>(data.data());
    double num = 0, den = 0, control = 0;
    for (int64_t t = 0; t < n_out; ++t)
        for (int64_t o = 0; o < cout; ++o) {
            double s = 0, m = 0, shifted = 0;  // shifted: windows one row late (the bug)
            for (int64_t c = 0; c < k * cin; ++c) {
                s += double(wf[o * k * cin + c]) * signal[size_t(t * cin + c)];
                m += std::fabs(double(wf[o * k * cin + c]) * signal[size_t(t * cin + c)]);
                const int64_t late = std::min(t + 1, n_out - 1);
                shifted += double(wf[o * k * cin + c]) * signal[size_t(late * cin + c)];
            }
            const double d = in_place[size_t(t * cout + o)] - s;
            num += d * d;
            den += m * m;
            control += (shifted - s) * (shifted - s);
        }
    const double err = std::sqrt(num / den), bad = std::sqrt(control / den), bar = 5e-8;
    std::printf("  strided windows: rel %.2e (bar %.0e); windows one row late %.2e\n", err, bar,
                bad);
    CHECK(err < bar);
    CHECK(bad > 10 * bar);
    ThreadPool one(1);
    CHECK_THROWS_AS(cpu::matmul_f32_strided(w, signal.data(), -1, 1, in_place.data(), one),
                    ShapeError);
}
