#include "nn/conv_transpose1d.h"

#include <algorithm>
#include <string>

#include "core/errors.h"
#include "core/thread_pool.h"
#include "nn/linear.h"

namespace dasllama::nn {

namespace {

// Splits [0, n) into the pool's shares.
template <typename Fn>
void parallel_rows(ThreadPool& pool, int64_t n, const Fn& fn) {
    pool.run([&](int share, int shares) {
        const int64_t r0 = n * share / shares, r1 = n * (share + 1) / shares;
        if (r0 < r1) fn(r0, r1);
    });
}

// Tile edge of the channel-major -> time-major transpose: 32 x 32 floats stay in L1.
constexpr int64_t kTransposeTile = 32;

}  // namespace

ConvTranspose1d::ConvTranspose1d(const float* weight, int64_t c_in, int64_t c_out, int64_t k,
                                 std::vector<float> bias, const ConvTransposeAttrs& attrs)
    : c_in_(c_in), c_out_(c_out), k_(k), a_(attrs), bias_(std::move(bias)) {
    auto fail = [&](const std::string& what) {
        throw ShapeError("conv_transpose1d: " + what + " (weight [" + std::to_string(c_in) +
                         ", " + std::to_string(attrs.groups > 0 ? c_out / attrs.groups : 0) +
                         ", " + std::to_string(k) + "])");
    };
    if (weight == nullptr) fail("no weight");
    if (c_in <= 0 || c_out <= 0 || k <= 0) fail("sizes must be positive");
    if (a_.stride <= 0) fail("stride " + std::to_string(a_.stride) + " must be positive");
    if (a_.dilation <= 0) fail("dilation " + std::to_string(a_.dilation) + " must be positive");
    if (a_.pad_left < 0 || a_.pad_right < 0) fail("negative padding");
    if (a_.output_padding < 0 || a_.output_padding >= std::max(a_.stride, a_.dilation))
        fail("output_padding " + std::to_string(a_.output_padding) +
             " must be in [0, max(stride, dilation))");
    if (a_.groups <= 0 || c_in % a_.groups != 0 || c_out % a_.groups != 0)
        fail("groups " + std::to_string(a_.groups) + " must divide C_in " +
             std::to_string(c_in) + " and C_out " + std::to_string(c_out));
    if (!bias_.empty() && int64_t(bias_.size()) != c_out)
        fail("bias of " + std::to_string(bias_.size()) + " values for " +
             std::to_string(c_out) + " channels");
    const int64_t cin_g = c_in / a_.groups, cout_g = c_out / a_.groups;
    weight_.assign(weight, weight + c_in * cout_g * k);
    if (cin_g == 1) return;   // direct path
    // Group g's matrix: row (o * K + t), column i  =  w[g * cin_g + i, o, t].
    packed_.resize(size_t(c_in * cout_g * k));
    for (int64_t g = 0; g < a_.groups; ++g) {
        float* dst = packed_.data() + g * cout_g * k * cin_g;
        for (int64_t i = 0; i < cin_g; ++i)
            for (int64_t o = 0; o < cout_g; ++o)
                for (int64_t t = 0; t < k; ++t)
                    dst[(o * k + t) * cin_g + i] = weight_[size_t(((g * cin_g + i) * cout_g + o) * k + t)];
    }
    weight_.clear();
    weight_.shrink_to_fit();
    for (int64_t g = 0; g < a_.groups; ++g)
        w_.push_back(f32_matrix(packed_.data() + g * cout_g * k * cin_g, cout_g * k, cin_g));
}

int64_t ConvTranspose1d::out_length(int64_t n) const {
    return a_.stride * (n - 1) + a_.dilation * (k_ - 1) + 1 + a_.output_padding - a_.pad_left -
           a_.pad_right;
}

void ConvTranspose1d::forward(const float* in, int64_t n, std::vector<float>& out,
                              ThreadPool& pool) {
    if (n <= 0 || out_length(n) <= 0)
        throw ShapeError("conv_transpose1d: an input of " + std::to_string(n) +
                         " positions gives no output");
    out.resize(size_t(c_out_ * out_length(n)));
    forward(in, n, out.data(), pool);
}

void ConvTranspose1d::forward(const float* in, int64_t n, float* out, ThreadPool& pool) {
    const int64_t len = out_length(n);
    if (n <= 0 || len <= 0)
        throw ShapeError("conv_transpose1d: an input of " + std::to_string(n) +
                         " positions gives no output");
    if (w_.empty())
        forward_direct(in, n, out, pool);
    else
        forward_matmul(in, n, out, pool);
}

void ConvTranspose1d::forward_direct(const float* in, int64_t n, float* out,
                                     ThreadPool& pool) const {
    const int64_t len = out_length(n), cout_g = c_out_ / a_.groups;
    const int64_t s = a_.stride, d = a_.dilation, pl = a_.pad_left;
    parallel_rows(pool, c_out_, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
            const int64_t i = o / cout_g;   // the group's single input channel
            const float* x = in + i * n;
            const float* w = weight_.data() + (i * cout_g + o % cout_g) * k_;
            float* y = out + o * len;
            std::fill(y, y + len, bias_.empty() ? 0.0f : bias_[size_t(o)]);
            for (int64_t t = 0; t < k_; ++t) {
                const float wt = w[t];
                const int64_t off = d * t - pl;   // y[s m + off] += wt x[m]
                int64_t m0 = off >= 0 ? 0 : (-off + s - 1) / s;
                int64_t m1 = std::min(n, (len - 1 - off) / s + 1);
                if (len - 1 - off < 0) continue;
                for (int64_t m = m0; m < m1; ++m) y[s * m + off] += wt * x[m];
            }
        }
    });
}

void ConvTranspose1d::forward_matmul(const float* in, int64_t n, float* out, ThreadPool& pool) {
    const int64_t len = out_length(n);
    const int64_t cin_g = c_in_ / a_.groups, cout_g = c_out_ / a_.groups;
    const int64_t s = a_.stride, d = a_.dilation, pl = a_.pad_left, zcols = cout_g * k_;
    // Time-major copy of the input: row m holds x[:, m].
    xt_.resize(size_t(n * c_in_));
    parallel_rows(pool, (n + kTransposeTile - 1) / kTransposeTile, [&](int64_t b0, int64_t b1) {
        for (int64_t m0 = b0 * kTransposeTile; m0 < std::min(n, b1 * kTransposeTile);
             m0 += kTransposeTile)
            for (int64_t c0 = 0; c0 < c_in_; c0 += kTransposeTile)
                for (int64_t c = c0; c < std::min(c_in_, c0 + kTransposeTile); ++c)
                    for (int64_t m = m0; m < std::min(n, m0 + kTransposeTile); ++m)
                        xt_[size_t(m * c_in_ + c)] = in[c * n + m];
    });
    z_.resize(size_t(n * zcols));
    for (int64_t g = 0; g < a_.groups; ++g) {
        // z[m, o * K + t] = sum_i w[g cin_g + i, o, t] x[g cin_g + i, m]
        cpu::matmul_f32_strided(w_[size_t(g)], xt_.data() + g * cin_g, c_in_, n, z_.data(), pool);
        // Overlap-add, one output channel per row: no two threads write the same sample.
        parallel_rows(pool, cout_g, [&](int64_t o0, int64_t o1) {
            for (int64_t o = o0; o < o1; ++o) {
                const int64_t oc = g * cout_g + o;
                float* y = out + oc * len;
                std::fill(y, y + len, bias_.empty() ? 0.0f : bias_[size_t(oc)]);
                const float* z = z_.data() + o * k_;
                for (int64_t m = 0; m < n; ++m) {
                    const float* zm = z + m * zcols;
                    const int64_t base = s * m - pl;
                    if (base >= 0 && base + d * (k_ - 1) < len) {
                        for (int64_t t = 0; t < k_; ++t) y[base + d * t] += zm[t];
                    } else {
                        for (int64_t t = 0; t < k_; ++t) {
                            const int64_t j = base + d * t;
                            if (j >= 0 && j < len) y[j] += zm[t];
                        }
                    }
                }
            }
        });
    }
}

}  // namespace dasllama::nn
