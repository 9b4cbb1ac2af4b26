// Kokoro's fused element-wise passes against the passes they replace, bit for bit (each does
// the same float32 operations per element; the integer sums are exact):
// - ActivationKernels::adain_snake against instance_norm, AdaIN's affine, nn::snake's row and
//   Int8Vector::range;
// - Int8Vector::quantize_time_major at every level against quantize plus a transposing copy;
// - Int8Kernels::gemm_gather against gemm over the im2col rows it reads in place.
// Each carries a negative control that must differ.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "nn/snake.h"
#include "tts/kokoro/int8_ops.h"
#include "tts/kokoro/no_contract.h"
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/style_blocks.h"

using namespace dasllama;
using namespace dasllama::kokoro;

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> normal(size_t n, float sd, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.3f, sd);
    std::vector<float> x(n);
    for (float& v : x) v = d(rng);
    return x;
}

// The unfused chain the fused pass replaces, row by row at the snake level `isa`.
void chain(const std::vector<float>& x, int64_t c, int64_t l, const std::vector<float>& h,
           const std::vector<float>& alpha, const char* isa, std::vector<float>& out,
           float range[3]) {
    out.resize(x.size());
    instance_norm(x.data(), c, l, kAdaInEps, out.data());
    for (int64_t i = 0; i < c; ++i) {
        const float g = h[size_t(i)] + 1.0f, b = h[size_t(c + i)];
        for (int64_t j = 0; j < l; ++j) {
            const float p = g * out[size_t(i * l + j)];   // two roundings, as AdaIN1d
            out[size_t(i * l + j)] = p + b;
        }
        nn::snake_kernels::variant(isa).row(out.data() + i * l, l, alpha[size_t(i)],
                                            1.0f / alpha[size_t(i)]);
    }
    int8_vector().range(out.data(), c * l, range[0], range[1], range[2]);
}

}  // namespace

TEST(adain_snake_equals_the_unfused_chain) {
    const ActivationKernels& act = activation_kernels();
    if (!act.adain_snake) {
        std::printf("adain_snake: no fused kernel at level %s; the unfused chain serves\n",
                    act.isa);
        return;
    }
    const int64_t c = 6, l = 1003;   // not a multiple of 16: the masked tail runs
    std::vector<float> x = normal(size_t(c * l), 2.0f, 11);
    std::vector<float> h = normal(size_t(2 * c), 0.5f, 12);
    const std::vector<float> alpha = {0.3f, 1.0f, 7.5f, 25.0f, 0.05f, 2.0f};
    // Row 3: an outlier and a large gamma put Snake's argument past the vector reduction's
    // limit in one lane group (the sinf fallback runs there).
    x[size_t(3 * l + 5)] = 400.0f;
    h[3] = 4000.0f;
    std::vector<float> want, got(x.size());
    float rw[3], rg[3];
    chain(x, c, l, h, alpha, act.isa, want, rw);
    act.adain_snake(x.data(), c, l, kAdaInEps, h.data(), h.data() + c, alpha.data(), got.data(),
                    rg);
    CHECK(same_bits(got, want));
    CHECK(rg[0] == rw[0] && rg[1] == rw[1] && rg[2] == 0.0f && rw[2] == 0.0f);
    // In place, as the residual block's second pair runs.
    std::vector<float> inplace = x;
    act.adain_snake(inplace.data(), c, l, kAdaInEps, h.data(), h.data() + c, alpha.data(),
                    inplace.data(), rg);
    CHECK(same_bits(inplace, want));
    // Negative control: gamma and beta swapped.
    std::vector<float> swapped(h.begin() + c, h.end());
    swapped.insert(swapped.end(), h.begin(), h.begin() + c);
    std::vector<float> control(x.size());
    act.adain_snake(x.data(), c, l, kAdaInEps, swapped.data(), swapped.data() + c, alpha.data(),
                    control.data(), rg);
    CHECK(!same_bits(control, want));
    // A NaN shows in the range's third value.
    x[size_t(2 * l + 7)] = std::nanf("");
    act.adain_snake(x.data(), c, l, kAdaInEps, h.data(), h.data() + c, alpha.data(), got.data(),
                    rg);
    CHECK(!(rg[2] == 0.0f));
}

TEST(quantize_time_major_equals_quantize_and_transpose) {
    const int64_t c = 37, ld = 300, t0 = 5, t1 = 290;   // channel and position tails
    const std::vector<float> x = normal(size_t(c * ld), 1.5f, 21);
    const QuantParams p = quant_params(x.data(), int64_t(x.size()));
    const float zp = float(p.zero_point);
    const int64_t n = t1 - t0;
    std::vector<uint8_t> want(static_cast<size_t>(n * c)), row(static_cast<size_t>(n));
    std::vector<int64_t> want_sums(static_cast<size_t>(n), 0);
    for (int64_t ci = 0; ci < c; ++ci) {
        quantize(x.data() + ci * ld + t0, n, p, row.data());
        for (int64_t t = 0; t < n; ++t) {
            want[size_t(t * c + ci)] = row[size_t(t)];
            want_sums[size_t(t)] += row[size_t(t)];
        }
    }
    std::vector<uint8_t> got(size_t(n * c));
    std::vector<int64_t> sums(static_cast<size_t>(n));
    int8_vector().quantize_time_major(x.data(), c, ld, t0, t1, p.scale, zp, got.data(),
                                      sums.data());
    CHECK(got == want);
    CHECK(sums == want_sums);
    // Negative control: the zero point one off.
    int8_vector().quantize_time_major(x.data(), c, ld, t0, t1, p.scale, zp + 1.0f, got.data(),
                                      sums.data());
    CHECK(got != want);
}

TEST(gemm_gather_equals_gemm_over_im2col_rows) {
    const int64_t cin = 128, taps = 3, dil = 2, stride = 1, n = 40;   // n: not a 32 multiple
    const int64_t k = cin * taps, kp = int8_padded(k), m = 64;
    const int64_t positions = m * stride + (taps - 1) * dil;
    std::mt19937 rng(31);
    std::uniform_int_distribution<int> u8(0, 255), s8(-128, 127);
    std::vector<uint8_t> input(size_t(positions * cin));   // time-major rows
    for (uint8_t& v : input) v = uint8_t(u8(rng));
    std::vector<int8_t> w(size_t(n * kp), 0);
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < k; ++i) w[size_t(r * kp + i)] = int8_t(s8(rng));
    std::vector<int64_t> koff;
    for (int64_t k0 = 0; k0 < kp; k0 += 64) koff.push_back((k0 / cin) * dil * cin + k0 % cin);
    std::vector<uint8_t> im2col(size_t(m * kp), 0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t tap = 0; tap < taps; ++tap)
            std::memcpy(&im2col[size_t(i * kp + tap * cin)],
                        &input[size_t((i * stride + tap * dil) * cin)], size_t(cin));
    int ran = 0;
    for (const std::string& isa : int8_kernel_levels()) {
        const Int8Kernels& kern = int8_kernels(isa);
        if (!kern.gemm_gather) continue;
        ++ran;
        std::vector<int8_t> packed(size_t(kern.padded_rows(n) * kp));
        kern.pack(w.data(), n, kp, packed.data());
        std::vector<int32_t> want(size_t(m * n)), got(size_t(m * n));
        kern.gemm(im2col.data(), kp, packed.data(), m, n, kp, want.data(), n);
        kern.gemm_gather(input.data(), stride * cin, koff.data(), packed.data(), m, n, kp,
                         got.data(), n);
        CHECK(got == want);
        // Negative control: the dilation forgotten in the offsets.
        std::vector<int64_t> wrong;
        for (int64_t k0 = 0; k0 < kp; k0 += 64) wrong.push_back((k0 / cin) * cin + k0 % cin);
        kern.gemm_gather(input.data(), stride * cin, wrong.data(), packed.data(), m, n, kp,
                         got.data(), n);
        CHECK(got != want);
    }
    std::printf("gemm_gather: %d level(s) have it\n", ran);
}
