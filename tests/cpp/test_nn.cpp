// csrc/nn (the blocks the speech models share) against plain double-precision versions written
// here from the definitions: 1-D convolution, STFT power (whole and by frames), bidirectional
// attention (attend_all's few-query and matmul paths; attend_self per variant and in bfloat16),
// the bfloat16 product, LayerNorm, erf GELU, softmax, log-sum-exp. Every comparison prints its
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
#include "nn/attention_self.h"
#include "nn/conv1d.h"
#include "nn/gemm_bf16.h"
#include "nn/layer_norm.h"
#include "nn/log_mel.h"

using namespace dasllama;

// Bars: a few times the errors measured on x86-64 (AVX2/AVX-512 float32 kernels against double):
// conv1d 6.8e-8, STFT power 1.2e-7, attention 1.0e-7, layer_norm 4.1e-8, gelu_erf 3.5e-8 (generic).
constexpr double kBarConv = 3e-7;
constexpr double kBarStft = 5e-7;
constexpr double kBarAttend = 4e-7;
constexpr double kBarNorm = 2e-7;
// attend_self at head_dim 64 (Whisper's): each score sums 64 float32 products and the softmax
// turns their rounding into relative errors of the weights: measured 3.4e-7 (both variants),
// 1.5e-7 at head_dim 16 and 2.4e-7 at 24.
constexpr double kBarAttendSelf = 1e-6;
// attend_self's bfloat16 path (AMX): queries, keys, probabilities and values rounded to 8
// significant bits; measured 3.3e-3 (random normal rows, head_dim 64).
constexpr double kBarAttendBf16 = 1e-2;
// gemm_bf16: both operands rounded to bfloat16, float32 sums: measured 2.3e-3 (random normal).
constexpr double kBarGemmBf16 = 1e-2;
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

// forward_gelu (the blocked product with the bias and GELU fused where the CPU has its
// kernel) against the double convolution's erf GELU; control: the GELU left out. Whisper's
// stem shape: 80 channels in (a 240-wide window), 40 out past one 32-row panel. Its bar is
// wider than kBarConv's (a 15-wide window): sums of 240 products (measured 1.8e-7).
constexpr double kBarConvGelu = 5e-7;
TEST(conv1d_gelu_matches_double) {
    ThreadPool pool(2);
    const int64_t T = 61, cin = 80, cout = 40, k = 3;
    auto x = randn(size_t(T * cin), 5), w = randn(size_t(cout * cin * k), 6, 0.1f),
         b = randn(size_t(cout), 7);
    for (int64_t stride : {1, 2}) {
        nn::Conv1d conv(w, b, cout, cin, k, stride, 1);
        std::vector<float> y;
        conv.forward_gelu(x.data(), T, y, pool);
        REQUIRE(int64_t(y.size()) == conv.out_length(T) * cout);
        const auto lin = naive_conv(x, T, cin, w, b, cout, k, stride, 1);
        std::vector<double> want(lin.size());
        for (size_t i = 0; i < lin.size(); ++i)
            want[i] = 0.5 * lin[i] * (1.0 + std::erf(lin[i] / std::sqrt(2.0)));
        CHECK(within(stride == 1 ? "conv1d + gelu stride 1" : "conv1d + gelu stride 2",
                     rel_l2(y, want), kBarConvGelu));
        CHECK(bites("  control: GELU left out", rel_l2(y, lin), kBarConvGelu));
    }
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

TEST(power_spectrum_frames_equal_the_whole_signal) {
    ThreadPool pool(2);
    const int64_t n = 2000, zeros = 160;
    auto x = randn(size_t(n), 9, 0.3f);
    std::vector<float> padded(x);
    padded.resize(size_t(n + zeros), 0.0f);
    nn::PowerSpectrum stft(400, 160);
    std::vector<float> whole, part;
    stft.compute(padded.data(), n + zeros, whole, pool);
    const int64_t frames = stft.n_frames(n + zeros), bins = stft.n_bins();
    // the first frames (reflected about sample 0), the middle, the last (reflected zeros)
    for (int64_t f0 : {int64_t(0), int64_t(3), frames - 4}) {
        stft.compute_frames(x.data(), n, zeros, f0, 4, part, pool);
        REQUIRE(int64_t(part.size()) == 4 * bins);
        const std::vector<float> want(whole.begin() + f0 * bins, whole.begin() + (f0 + 4) * bins);
        CHECK_MSG(part == want, "compute_frames(" + std::to_string(f0) + ", 4) != compute()");
        // control: the same frames one hop later differ
        const int64_t g0 = f0 == 0 ? 1 : f0 - 1;
        const std::vector<float> other(whole.begin() + g0 * bins, whole.begin() + (g0 + 4) * bins);
        CHECK(rel_l2(part, std::vector<double>(other.begin(), other.end())) > 1e-2);
    }
    CHECK_THROWS_AS(stft.compute_frames(x.data(), n, zeros, frames - 3, 4, part, pool), ShapeError);
    CHECK_THROWS_AS(stft.compute_frames(x.data(), n, zeros, -1, 4, part, pool), ShapeError);
    CHECK_THROWS_AS(stft.compute_frames(x.data(), 100, 100, 0, 1, part, pool), ShapeError);
}

TEST(attend_self_matches_double) {
    ThreadPool pool(2);
    // head_dim 64 (Whisper's) and 16 go through the vector tiles, 24 through the generic
    // fallback; query counts cover whole and partial tiles and blocks, keys a partial pad.
    struct Shape { int64_t n_head, hd, n; };
    for (const Shape sh : {Shape{3, 64, 150}, Shape{2, 16, 31}, Shape{2, 24, 70}}) {
        const int64_t d = sh.n_head * sh.hd, ld = 3 * d;
        auto qkv = randn(size_t(sh.n * ld), 11 + uint32_t(sh.hd));
        std::vector<float> q(size_t(sh.n * d)), k(q.size()), v(q.size());
        for (int64_t t = 0; t < sh.n; ++t)
            for (int64_t c = 0; c < d; ++c) {
                q[size_t(t * d + c)] = qkv[size_t(t * ld + c)];
                k[size_t(t * d + c)] = qkv[size_t(t * ld + d + c)];
                v[size_t(t * d + c)] = qkv[size_t(t * ld + 2 * d + c)];
            }
        const double scale = 1.0 / std::sqrt(double(sh.hd));
        const auto want = naive_attend(q, sh.n, k, v, sh.n, sh.n_head, sh.hd, scale);
        const auto unscaled = naive_attend(q, sh.n, k, v, sh.n, sh.n_head, sh.hd, 1.0);
        for (const std::string& isa : nn::self_attn::available_variants()) {
            nn::SelfAttendScratch scratch;
            std::vector<float> out(size_t(sh.n * d), -1.0f);
            nn::attend_self_with(isa, qkv.data(), qkv.data() + d, qkv.data() + 2 * d, ld, sh.n,
                                 sh.n_head, sh.hd, float(scale), out.data(), d, pool, scratch);
            const std::string what = "attend_self " + isa + ", " + std::to_string(sh.n_head) +
                                     " heads of " + std::to_string(sh.hd) + ", " +
                                     std::to_string(sh.n) + " rows";
            CHECK(within(what.c_str(), rel_l2(out, want), kBarAttendSelf));
            CHECK(bites("  control: unscaled scores", rel_l2(out, unscaled), kBarAttendSelf));
        }
        // the entry point: the best variant, or attend_all where only generic kernels run
        nn::SelfAttendScratch scratch;
        std::vector<float> out(size_t(sh.n * d), -1.0f);
        nn::attend_self(qkv.data(), qkv.data() + d, qkv.data() + 2 * d, ld, sh.n, sh.n_head,
                        sh.hd, float(scale), out.data(), d, pool, scratch);
        CHECK(within("  attend_self (entry point)", rel_l2(out, want), kBarAttendSelf));
    }
    nn::SelfAttendScratch scratch;
    std::vector<float> buf(64);
    CHECK_THROWS_AS(nn::attend_self(buf.data(), buf.data(), buf.data(), 8, 0, 1, 8, 1.0f,
                                    buf.data(), 8, pool, scratch), ShapeError);
}

TEST(attend_self_bf16_matches_double) {
    if (!nn::bf16_available(nn::self_attn::kBf16HeadDim)) {
        std::printf("  skipped: no AMX bfloat16 kernels on this CPU or build\n");
        return;
    }
    ThreadPool pool(2);
    // query blocks whole and partial, a last tile of 16 rows partial, keys padded
    for (const int64_t n : {int64_t(16), int64_t(70), int64_t(150)}) {
        const int64_t n_head = 2, hd = nn::self_attn::kBf16HeadDim, d = n_head * hd, ld = 3 * d;
        auto qkv = randn(size_t(n * ld), 17 + uint32_t(n));
        std::vector<float> q(size_t(n * d)), k(q.size()), v(q.size());
        for (int64_t t = 0; t < n; ++t)
            for (int64_t c = 0; c < d; ++c) {
                q[size_t(t * d + c)] = qkv[size_t(t * ld + c)];
                k[size_t(t * d + c)] = qkv[size_t(t * ld + d + c)];
                v[size_t(t * d + c)] = qkv[size_t(t * ld + 2 * d + c)];
            }
        const double scale = 1.0 / std::sqrt(double(hd));
        nn::SelfAttendScratch scratch;
        std::vector<float> out(size_t(n * d), -1.0f);
        nn::attend_self(qkv.data(), qkv.data() + d, qkv.data() + 2 * d, ld, n, n_head, hd,
                        float(scale), out.data(), d, pool, scratch, nn::AttendPrecision::kBF16);
        const std::string what = "attend_self bf16, " + std::to_string(n) + " rows";
        CHECK(within(what.c_str(), rel_l2(out, naive_attend(q, n, k, v, n, n_head, hd, scale)),
                     kBarAttendBf16));
        CHECK(bites("  control: unscaled scores",
                    rel_l2(out, naive_attend(q, n, k, v, n, n_head, hd, 1.0)), kBarAttendBf16));
    }
}

TEST(gemm_bf16_matches_double) {
    CHECK_THROWS_AS(nn::pack_bf16(nullptr, 48, 64), ShapeError);
    if (!nn::gemm_bf16_available()) {
        std::printf("  skipped: no AMX bfloat16 kernels on this CPU or build\n");
        return;
    }
    ThreadPool pool(2);
    const int64_t rows = 320, cols = 96;   // two row groups, the second partial
    auto w = randn(size_t(rows * cols), 21);
    const nn::Bf16Matrix packed = nn::pack_bf16(w.data(), rows, cols);
    // token blocks partial and whole
    for (const int64_t n : {int64_t(1), int64_t(32), int64_t(70)}) {
        auto x = randn(size_t(n * cols), 22 + uint32_t(n));
        auto naive = [&](bool swap_pairs) {
            std::vector<double> y(size_t(n * rows));
            for (int64_t t = 0; t < n; ++t)
                for (int64_t r = 0; r < rows; ++r) {
                    double s = 0;
                    for (int64_t c = 0; c < cols; ++c)
                        s += double(w[size_t(r * cols + (swap_pairs ? c ^ 1 : c))]) *
                             x[size_t(t * cols + c)];
                    y[size_t(t * rows + r)] = s;
                }
            return y;
        };
        std::vector<float> y(size_t(n * rows), -1.0f);
        nn::Bf16GemmScratch scratch;
        nn::gemm_bf16(packed, x.data(), n, y.data(), pool, scratch);
        const std::string what = "gemm_bf16, " + std::to_string(n) + " rows";
        CHECK(within(what.c_str(), rel_l2(y, naive(false)), kBarGemmBf16));
        CHECK(bites("  control: the columns of each pair swapped", rel_l2(y, naive(true)),
                    kBarGemmBf16));
    }
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

TEST(power_spectrum_frames_from_a_span_equal_the_whole_signal) {
    ThreadPool pool(2);
    const int64_t n = 5000, zeros = 160;
    auto x = randn(size_t(n), 19, 0.3f);
    nn::PowerSpectrum stft(400, 160);
    std::vector<float> whole, part;
    const int64_t frames = stft.n_frames(n + zeros);
    for (int64_t f0 : {int64_t(0), int64_t(10), frames - 4}) {
        stft.compute_frames(x.data(), n, zeros, f0, 4, whole, pool);
        // the samples those frames read: [f0 * hop - 200, (f0 + 3) * hop + 200) inside the clip
        const int64_t lo = std::max<int64_t>(0, f0 * 160 - 200);
        const int64_t hi = std::min<int64_t>(n, (f0 + 3) * 160 + 200);
        stft.compute_frames(x.data() + lo, lo, hi - lo, n, zeros, f0, 4, part, pool);
        CHECK_MSG(part == whole, "compute_frames from samples [" + std::to_string(lo) + ", " +
                                     std::to_string(hi) + ") != from the whole clip");
        // control: the span one sample late is not the same signal
        if (lo + 1 < n && hi + 1 <= n) {
            stft.compute_frames(x.data() + lo + 1, lo, hi - lo, n, zeros, f0, 4, part, pool);
            CHECK(part != whole);
        }
        if (f0 > 0)   // a span that starts one sample too late is refused
            CHECK_THROWS_AS(stft.compute_frames(x.data() + lo + 1, lo + 1, hi - lo - 1, n, zeros,
                                                f0, 4, part, pool),
                            ShapeError);
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
