#include "tts/pocket/conv.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/errors.h"
#include "core/formats.h"
#include "core/thread_pool.h"
#include "cpu/ops.h"

namespace dasllama::pocket {

namespace {

// A float32 matrix owned by `data` as a WeightMatrix for cpu::matmul.
cpu::WeightMatrix f32_matrix(const std::vector<float>& data, int64_t rows, int64_t cols) {
    const TypeTraits* f32 = type_traits(uint32_t(GgmlType::F32));
    return cpu::prepare_weight(*f32, rows, cols, reinterpret_cast<const uint8_t*>(data.data()),
                               nullptr);
}

}  // namespace

// =============================================================================================
// StreamConv1d
// =============================================================================================

StreamConv1d::StreamConv1d(const ConvWeights& w, int64_t stride, int64_t dilation,
                           bool replicate_pad)
    : cin_(w.d1), cout_(w.d0), k_(w.k), stride_(stride), dilation_(dilation),
      replicate_(replicate_pad), bias_(w.bias) {
    // (Cout, Cin, K) -> (Cout, K, Cin): one output row is one im2col row times a weight row.
    packed_.resize(size_t(cout_ * k_ * cin_));
    for (int64_t o = 0; o < cout_; ++o)
        for (int64_t i = 0; i < cin_; ++i)
            for (int64_t k = 0; k < k_; ++k)
                packed_[size_t((o * k_ + k) * cin_ + i)] = w.weight[size_t((o * cin_ + i) * k_ + k)];
    w_ = f32_matrix(packed_, cout_, k_ * cin_);
    reset();
}

void StreamConv1d::reset() {
    const int64_t pad = std::max<int64_t>(0, (k_ - 1) * dilation_ + 1 - stride_);
    history_.assign(size_t(pad * cin_), 0.0f);
    fresh_ = true;
}

int64_t StreamConv1d::process(const float* in, int64_t T, std::vector<float>& out,
                              ThreadPool& pool) {
    if (T > 0 && fresh_ && replicate_) {
        const int64_t pad = int64_t(history_.size()) / cin_;
        for (int64_t r = 0; r < pad; ++r) std::copy(in, in + cin_, history_.data() + r * cin_);
    }
    if (T > 0) fresh_ = false;
    const int64_t hist = int64_t(history_.size()) / cin_;
    const int64_t len = hist + T;
    const int64_t span = (k_ - 1) * dilation_ + 1;
    const int64_t n_out = len >= span ? (len - span) / stride_ + 1 : 0;
    out.resize(size_t(n_out * cout_));
    const float* src;
    if (hist == 0) {
        src = in;
    } else {
        buf_.resize(size_t(len * cin_));
        std::copy(history_.begin(), history_.end(), buf_.begin());
        std::copy(in, in + T * cin_, buf_.begin() + hist * cin_);
        src = buf_.data();
    }
    if (n_out > 0) {
        const float* x = src;
        if (!(k_ == 1 && stride_ == 1)) {
            cols_.resize(size_t(n_out * k_ * cin_));
            for (int64_t t = 0; t < n_out; ++t)
                for (int64_t k = 0; k < k_; ++k)
                    std::memcpy(cols_.data() + (t * k_ + k) * cin_,
                                src + (t * stride_ + k * dilation_) * cin_,
                                size_t(cin_) * sizeof(float));
            x = cols_.data();
        }
        cpu::matmul(w_, x, n_out, out.data(), pool, cpu::Precision::kF32);
        if (!bias_.empty()) cpu::add_rows(out.data(), nullptr, bias_.data(), n_out, cout_);
    }
    // Keep what the next outputs still need: rows from n_out * stride on.
    const int64_t keep_from = n_out * stride_;
    std::vector<float> next(src + keep_from * cin_, src + len * cin_);
    history_.swap(next);
    return n_out;
}

// =============================================================================================
// StreamConvTr1d
// =============================================================================================

StreamConvTr1d::StreamConvTr1d(const ConvWeights& w, int64_t stride, bool depthwise)
    : cin_(w.d0), cout_(depthwise ? w.d0 : w.d1), k_(w.k), stride_(stride),
      depthwise_(depthwise), weight_(w.weight), bias_(w.bias) {
    if (k_ < stride_)
        throw ShapeError("pocket: a transposed convolution's kernel " + std::to_string(k_) +
                         " is shorter than its stride " + std::to_string(stride_));
    if (!depthwise_) {
        // (Cin, Cout, K) -> (K, Cout, Cin): row k * Cout + o of the product is tap k of output o.
        packed_.resize(size_t(k_ * cout_ * cin_));
        for (int64_t i = 0; i < cin_; ++i)
            for (int64_t o = 0; o < cout_; ++o)
                for (int64_t k = 0; k < k_; ++k)
                    packed_[size_t((k * cout_ + o) * cin_ + i)] = w.weight[size_t((i * cout_ + o) * k_ + k)];
        w_ = f32_matrix(packed_, k_ * cout_, cin_);
    }
    reset();
}

void StreamConvTr1d::reset() { tail_.assign(size_t((k_ - stride_) * cout_), 0.0f); }

void StreamConvTr1d::process(const float* in, int64_t T, std::vector<float>& out,
                             ThreadPool& pool) {
    const int64_t C = cout_, n_full = (T - 1) * stride_ + k_;
    if (T <= 0) {
        out.clear();
        return;
    }
    y_.assign(size_t(n_full * C), 0.0f);
    std::copy(tail_.begin(), tail_.end(), y_.begin());
    if (depthwise_) {
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < k_; ++k) {
                float* y = y_.data() + (t * stride_ + k) * C;
                const float* x = in + t * C;
                for (int64_t c = 0; c < C; ++c) y[c] += weight_[size_t(c * k_ + k)] * x[c];
            }
    } else {
        z_.resize(size_t(T * k_ * C));
        cpu::matmul(w_, in, T, z_.data(), pool, cpu::Precision::kF32);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < k_; ++k)
                cpu::add(y_.data() + (t * stride_ + k) * C, z_.data() + (t * k_ + k) * C, C);
    }
    const int64_t n_out = T * stride_;
    tail_.assign(y_.begin() + n_out * C, y_.begin() + n_full * C);
    out.assign(y_.begin(), y_.begin() + n_out * C);
    if (!bias_.empty()) cpu::add_rows(out.data(), nullptr, bias_.data(), n_out, C);
}

}  // namespace dasllama::pocket
