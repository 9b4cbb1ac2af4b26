#include "tts/kokoro/style_blocks.h"
#include "tts/kokoro/no_contract.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "nn/conv_transpose1d.h"
#include "nn/snake.h"
#include "tts/kokoro/onnx_math.h"
#include "tts/kokoro/parallel.h"

namespace dasllama::kokoro {

namespace {

// AdaIN's affine over rows [c0, c1) of out [C, L]: (1 + gamma) * v + beta, h = [gamma | beta].
void affine_rows(const float* h, int64_t c, int64_t c0, int64_t c1, int64_t l, float* out) {
    for (int64_t i = c0; i < c1; ++i) {
        const float g = h[i] + 1.0f, b = h[c + i];
        float* row = out + i * l;
        for (int64_t j = 0; j < l; ++j) row[j] = g * row[j] + b;
    }
}

constexpr float kRsqrt2 = 1.4142135381698608f;   // residual blocks divide by this (sqrt(2))

// The pool for callers that pass none (the transposed convolution takes one by reference).
ThreadPool& serial_pool() {
    static ThreadPool one(1);
    return one;
}

}  // namespace

// ============================================================================ StyleFcCache

// fc(style) for one style row: the row is quantized on its own, as the graph does.
const std::vector<float>& StyleFcCache::get(const Linear& fc, const float* style) const {
    const size_t k = size_t(fc.in());
    if (h_.size() == size_t(fc.out()) && style_.size() == k &&
        std::memcmp(style_.data(), style, k * sizeof(float)) == 0)
        return h_;
    h_.resize(size_t(fc.out()));
    fc.forward(style, 1, h_.data(), nullptr);
    style_.assign(style, style + k);
    return h_;
}

// ============================================================================ AdaIN1d

AdaIN1d AdaIN1d::load(const KokoroWeights& w, const std::string& module) {
    AdaIN1d a;
    a.fc_ = Linear::load(w, module + ".fc");
    if (a.fc_.out() % 2)
        throw ShapeError(w.path() + ": " + module + ".fc has an odd width " +
                         std::to_string(a.fc_.out()));
    return a;
}

void AdaIN1d::forward(const float* x, int64_t l, const float* style, float* out,
                      ThreadPool* pool) const {
    const int64_t c = channels();
    const std::vector<float>& h = cache_.get(fc_, style);
    parallel_rows(pool, c, l, [&](int64_t c0, int64_t c1) {
        instance_norm(x + c0 * l, c1 - c0, l, kAdaInEps, out + c0 * l);
        affine_rows(h.data(), c, c0, c1, l, out);
    });
}

void AdaIN1d::forward_snake(const float* x, int64_t l, const float* style, const float* alpha,
                            float* out, QuantRange& range, ThreadPool* pool) const {
    const int64_t c = channels();
    const std::vector<float>& h = cache_.get(fc_, style);
    const ActivationKernels& act = activation_kernels();
    const nn::snake_kernels::Kernels& sk = nn::snake_kernels::active();
    // The fused pass reproduces the AVX-512 snake row; with any other snake level the chain
    // runs unfused (the same bits either way).
    const bool fused = act.adain_snake && std::strcmp(sk.isa, act.isa) == 0;
    auto rows = [&](int64_t c0, int64_t c1, float* part) {
        if (fused) {
            act.adain_snake(x + c0 * l, c1 - c0, l, kAdaInEps, h.data() + c0, h.data() + c + c0,
                            alpha + c0, out + c0 * l, part);
            return;
        }
        instance_norm(x + c0 * l, c1 - c0, l, kAdaInEps, out + c0 * l);
        affine_rows(h.data(), c, c0, c1, l, out);
        for (int64_t i = c0; i < c1; ++i) sk.row(out + i * l, l, alpha[i], 1.0f / alpha[i]);
        int8_vector().range(out + c0 * l, (c1 - c0) * l, part[0], part[1], part[2]);
    };
    const int threads = pool ? pool->size() : 1;
    std::vector<float> parts(size_t(3 * threads), 0.0f);
    if (threads <= 1 || c < 2 || c * l < kParallelValues) {
        rows(0, c, parts.data());
    } else {
        pool->run([&](int t, int nt) {
            const int64_t r0 = c * t / nt, r1 = c * (t + 1) / nt;
            if (r0 < r1) rows(r0, r1, &parts[size_t(3 * t)]);
        });
    }
    range = QuantRange{};
    for (int t = 0; t < threads; ++t) {   // min and max exact in any order; zero is 0 or NaN
        range.lo = std::min(range.lo, parts[size_t(3 * t)]);
        range.hi = std::max(range.hi, parts[size_t(3 * t + 1)]);
        range.zero = range.zero + parts[size_t(3 * t + 2)];
    }
}

// ============================================================================ AdaLayerNorm

AdaLayerNorm AdaLayerNorm::load(const KokoroWeights& w, const std::string& module) {
    AdaLayerNorm a;
    a.fc_ = Linear::load(w, module + ".fc");
    const int64_t c = a.fc_.out() / 2;
    a.weight_ = w.f32(module + ".weight", {c}).f32();
    a.bias_ = w.f32(module + ".bias", {c}).f32();
    a.eps_ = w.eps(module);
    return a;
}

void AdaLayerNorm::forward(const float* x, int64_t t, const float* style, float* out,
                           ThreadPool*) const {
    const int64_t c = channels();
    const std::vector<float>& h = cache_.get(fc_, style);
    layer_norm_lanes(x, weight_, bias_, t, c, eps_, out);
    for (int64_t r = 0; r < t; ++r)
        for (int64_t j = 0; j < c; ++j)
            out[r * c + j] = (h[size_t(j)] + 1.0f) * out[r * c + j] + h[size_t(c + j)];
}

// ============================================================================ AdainResBlk1d

AdainResBlk1d::AdainResBlk1d() = default;
AdainResBlk1d::~AdainResBlk1d() = default;
AdainResBlk1d::AdainResBlk1d(AdainResBlk1d&&) noexcept = default;
AdainResBlk1d& AdainResBlk1d::operator=(AdainResBlk1d&&) noexcept = default;

AdainResBlk1d AdainResBlk1d::load(const KokoroWeights& w, const std::string& module) {
    AdainResBlk1d b;
    b.name_ = w.path() + ": " + module;
    b.norm1_ = AdaIN1d::load(w, module + ".norm1");
    b.norm2_ = AdaIN1d::load(w, module + ".norm2");
    b.conv1_ = Conv::load(w, module + ".conv1");
    b.conv2_ = Conv::load(w, module + ".conv2");
    b.upsample_ = w.has(module + ".pool.weight");
    b.shortcut_conv_ = w.has(module + ".conv1x1.weight");
    if (b.shortcut_conv_) b.conv1x1_ = Conv::load(w, module + ".conv1x1");
    const int64_t cin = b.conv1_.c_in();
    if (b.norm1_.channels() != cin || b.norm2_.channels() != b.conv2_.c_in() ||
        b.conv1_.c_out() != b.conv2_.c_in() ||
        (b.shortcut_conv_ ? b.conv1x1_.c_in() != cin || b.conv1x1_.c_out() != b.conv2_.c_out()
                          : cin != b.conv2_.c_out()))
        throw ShapeError(b.name_ + ": the norms' and convolutions' widths do not chain");
    if (b.upsample_) {
        const TensorView pw = w.f32(module + ".pool.weight", {cin, 1, -1});
        const ConvAttrs a = w.conv(module + ".pool");
        nn::ConvTransposeAttrs t;
        t.stride = a.stride;
        t.pad_left = a.pad_left;
        t.pad_right = a.pad_right;
        t.dilation = a.dilation;
        t.groups = a.groups;
        t.output_padding = a.output_padding;
        if (a.groups != cin || a.stride != 2)
            throw ShapeError(b.name_ + ".pool: expected a depthwise x2 transposed convolution");
        // The bias is added after the taps, as the reference does (see forward).
        b.pool_ = std::make_unique<nn::ConvTranspose1d>(pw.f32(), cin, cin, pw.dim(2),
                                                        std::vector<float>{}, t);
        b.pool_bias_ = w.f32(module + ".pool.bias", {cin}).f32();
        if (b.pool_->out_length(4) != 8)
            throw ShapeError(b.name_ + ".pool: its output is not twice its input");
    }
    return b;
}

void AdainResBlk1d::forward(const std::vector<float>& x, int64_t l, const float* style,
                            std::vector<float>& out, ThreadPool* pool) const {
    const int64_t cin = c_in(), cout = c_out(), lo = out_length(l);
    if (int64_t(x.size()) != cin * l)
        throw ShapeError(name_ + ": input of " + std::to_string(x.size()) + " values, expected " +
                         std::to_string(cin) + " x " + std::to_string(l));
    // residual
    std::vector<float> r(size_t(cin * l));
    norm1_.forward(x.data(), l, style, r.data(), pool);
    leaky_relu(r.data(), cin * l, kBlockSlope);
    if (upsample_) {
        std::vector<float> up(size_t(cin * pool_->out_length(l)));
        pool_->forward(r.data(), l, up.data(), pool ? *pool : serial_pool());
        const int64_t lu = pool_->out_length(l);
        if (lu != lo) throw ShapeError(name_ + ".pool: output length " + std::to_string(lu));
        for (int64_t c = 0; c < cin; ++c)
            for (int64_t j = 0; j < lu; ++j) up[size_t(c * lu + j)] += pool_bias_[c];
        r.swap(up);
    }
    std::vector<float> r1;
    conv1_.forward(r, lo, r1, pool);
    norm2_.forward(r1.data(), lo, style, r1.data(), pool);
    leaky_relu(r1.data(), int64_t(r1.size()), kBlockSlope);
    std::vector<float> r2;
    conv2_.forward(r1, lo, r2, pool);
    // shortcut
    std::vector<float> s;
    if (upsample_) {
        s.resize(size_t(cin * lo));
        for (int64_t c = 0; c < cin; ++c)
            for (int64_t j = 0; j < l; ++j)
                s[size_t(c * lo + 2 * j)] = s[size_t(c * lo + 2 * j + 1)] = x[size_t(c * l + j)];
    } else {
        s = x;
    }
    if (shortcut_conv_) {
        std::vector<float> sc;
        conv1x1_.forward(s, lo, sc, pool);
        s.swap(sc);
    }
    out.resize(size_t(cout * lo));
    for (size_t i = 0; i < out.size(); ++i) out[i] = (r2[i] + s[i]) / kRsqrt2;
}

}  // namespace dasllama::kokoro
