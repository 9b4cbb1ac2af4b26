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
    hist_ = std::max<int64_t>(0, (k_ - 1) * dilation_ + 1 - stride_);
    buf_.assign(size_t(hist_ * cin_), 0.0f);
    fresh_ = true;
}

int64_t StreamConv1d::process(const float* in, int64_t T, std::vector<float>& out,
                              ThreadPool& pool) {
    if (T > 0 && fresh_ && replicate_)
        for (int64_t r = 0; r < hist_; ++r) std::copy(in, in + cin_, buf_.data() + r * cin_);
    if (T > 0) fresh_ = false;
    const int64_t len = hist_ + T;
    const int64_t span = (k_ - 1) * dilation_ + 1;
    const int64_t n_out = len >= span ? (len - span) / stride_ + 1 : 0;
    out.resize(size_t(n_out * cout_));
    // The signal so far: the kept rows, then this call's (no copy when nothing is kept). buf_
    // only grows: its size is room, hist_ says how much of it is kept signal.
    const float* src = in;
    if (hist_ > 0) {
        if (buf_.size() < size_t(len * cin_)) buf_.resize(size_t(len * cin_));
        std::copy(in, in + T * cin_, buf_.data() + hist_ * cin_);
        src = buf_.data();
    }
    if (n_out > 0) {
        if (k_ == 1 || dilation_ == 1) {
            // Window t is rows [t * stride, t * stride + k) of the signal: k * cin contiguous
            // floats, so the product reads the windows in place.
            cpu::matmul_f32_strided(w_, src, stride_ * cin_, n_out, out.data(), pool);
        } else {
            cols_.resize(size_t(n_out * k_ * cin_));
            for (int64_t t = 0; t < n_out; ++t)
                for (int64_t k = 0; k < k_; ++k)
                    std::memcpy(cols_.data() + (t * k_ + k) * cin_,
                                src + (t * stride_ + k * dilation_) * cin_,
                                size_t(cin_) * sizeof(float));
            cpu::matmul(w_, cols_.data(), n_out, out.data(), pool, cpu::Precision::kF32);
        }
        if (!bias_.empty()) cpu::add_rows(out.data(), nullptr, bias_.data(), n_out, cout_);
    }
    // Keep what the next outputs still need: rows from n_out * stride on.
    const int64_t keep_from = std::min(len, n_out * stride_);
    if (len > keep_from) {
        const size_t kept = size_t((len - keep_from) * cin_);
        if (buf_.size() < kept) buf_.resize(kept);
        // Forward copy within buf_ (the destination starts before the source) or from `in`.
        std::copy(src + keep_from * cin_, src + len * cin_, buf_.data());
    }
    hist_ = len - keep_from;
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
    const int64_t C = cout_, n_out = T * stride_, n_tail = k_ - stride_;
    if (T <= 0) {
        out.clear();
        return;
    }
    // Output row p collects tap k of input t where p = t * stride + k; rows past this call's
    // output wait in the tail for the next call. The bias is in the output rows only.
    out.resize(size_t(n_out * C));
    for (int64_t p = 0; p < n_out; ++p) {
        float* o = out.data() + p * C;
        if (bias_.empty())
            std::fill(o, o + C, 0.0f);
        else
            std::copy(bias_.begin(), bias_.end(), o);
    }
    next_tail_.assign(size_t(n_tail * C), 0.0f);
    auto row = [&](int64_t p) {
        return p < n_out ? out.data() + p * C : next_tail_.data() + (p - n_out) * C;
    };
    for (int64_t p = 0; p < n_tail; ++p) cpu::add(row(p), tail_.data() + p * C, C);
    if (depthwise_) {
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < k_; ++k) {
                float* y = row(t * stride_ + k);
                const float* x = in + t * C;
                for (int64_t c = 0; c < C; ++c) y[c] += weight_[size_t(c * k_ + k)] * x[c];
            }
    } else {
        z_.resize(size_t(T * k_ * C));
        cpu::matmul(w_, in, T, z_.data(), pool, cpu::Precision::kF32);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < k_; ++k)
                cpu::add(row(t * stride_ + k), z_.data() + (t * k_ + k) * C, C);
    }
    tail_.swap(next_tail_);
}

}  // namespace dasllama::pocket
