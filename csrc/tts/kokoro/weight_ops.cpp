#include "tts/kokoro/weight_ops.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "cpu/dot.h"
#include "nn/linear.h"

namespace dasllama::kokoro {

namespace {

// Output positions per im2col block of a float convolution: the block (positions x C_in * K
// floats, at most 512 x 5632 for Kokoro's widest) stays a few MiB while each matmul still has
// hundreds of rows to share among the threads.
constexpr int64_t kFloatConvBlock = 512;

FloatMatrix view_matrix(const float* data, int64_t rows, int64_t cols,
                        std::shared_ptr<const std::vector<float>> owned) {
    FloatMatrix f;
    f.m = nn::f32_matrix(data, rows, cols);
    f.owned = std::move(owned);
    return f;
}

}  // namespace

Lane lane_of(const KokoroWeights& w, const std::string& name) {
    const std::string t = w.type_of(name);
    if (t == "I8") return Lane::kInt8;
    if (t == "F32") return Lane::kFloat;
    throw FormatError(w.path() + ": tensor '" + name + "' is " + t +
                      "; Kokoro's weights are I8 (the int8 graph) or F32");
}

void FloatMatrix::forward(const float* x, int64_t n_rows, float* y, ThreadPool* pool) const {
    if (pool) {
        cpu::matmul(m, x, n_rows, y, *pool, cpu::Precision::kF32);
        return;
    }
    const float* w = reinterpret_cast<const float*>(m.data);
    for (int64_t i = 0; i < n_rows; ++i)
        for (int64_t r = 0; r < m.rows; ++r)
            y[i * m.rows + r] = cpu::dot_f32(x + i * m.cols, w + r * m.cols, m.cols);
}

// ============================================================================ Linear

Linear Linear::from_int8(QLinear q) {
    Linear l;
    l.lane_ = Lane::kInt8;
    l.q_ = std::move(q);
    l.name_ = l.q_.name();
    l.k_ = l.q_.in();
    l.n_ = l.q_.out();
    return l;
}

Linear Linear::load(const KokoroWeights& w, const std::string& module, bool with_bias) {
    const std::string wname = module + ".weight";
    if (lane_of(w, wname) == Lane::kInt8) return from_int8(QLinear::load(w, module, with_bias));
    const TensorView wt = w.f32(wname, {-1, -1});
    const int64_t n = wt.dim(1);
    const float* bias = nullptr;
    if (with_bias && w.has(module + ".bias")) bias = w.f32(module + ".bias", {n}).f32();
    return from_floats(wt.f32(), wt.dim(0), n, bias, w.path() + ": " + module);
}

Linear Linear::from_floats(const float* w, int64_t k, int64_t n, const float* bias,
                           const std::string& name) {
    if (k < 1 || n < 1)
        throw ShapeError(name + ": a linear of " + std::to_string(k) + " x " + std::to_string(n));
    Linear l;
    l.lane_ = Lane::kFloat;
    l.name_ = name;
    l.k_ = k;
    l.n_ = n;
    auto t = std::make_shared<std::vector<float>>(size_t(k * n));   // (K, N) -> (N, K)
    for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < n; ++j) (*t)[size_t(j * k + i)] = w[i * n + j];
    l.f_ = view_matrix(t->data(), n, k, t);
    if (bias) l.bias_.assign(bias, bias + n);
    return l;
}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool* pool) const {
    if (lane_ == Lane::kInt8) {
        q_.forward(x, m, y, pool);
        return;
    }
    f_.forward(x, m, y, pool);
    if (!bias_.empty())
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n_; ++j) y[i * n_ + j] = y[i * n_ + j] + bias_[size_t(j)];
}

// ============================================================================ Conv

Conv Conv::load(const KokoroWeights& w, const std::string& module) {
    Conv c;
    const std::string wname = module + ".weight";
    c.lane_ = lane_of(w, wname);
    if (c.lane_ == Lane::kInt8) {
        c.q_ = QConv::load(w, module);
        c.name_ = w.path() + ": " + module;
        c.c_in_ = c.q_.c_in();
        c.c_out_ = c.q_.c_out();
        c.k_ = c.q_.kernel();
        c.a_ = c.q_.attrs();
        return c;
    }
    c.name_ = w.path() + ": " + module;
    c.a_ = w.conv(module);
    const TensorView wt = w.f32(wname, {-1, -1, -1});
    const int64_t groups = c.a_.groups;
    c.c_out_ = wt.dim(0);
    c.c_in_ = wt.dim(1) * groups;
    c.k_ = wt.dim(2);
    if (c.c_out_ % groups)
        throw ShapeError(c.name_ + ": groups " + std::to_string(groups) + " do not divide " +
                         std::to_string(c.c_out_) + " outputs");
    const int64_t cout_g = c.c_out_ / groups, cols = wt.dim(1) * c.k_;
    // The file's [C_out, C_in / g, K] is already the matmul's [rows, cols]: viewed in the mapping.
    for (int64_t g = 0; g < groups; ++g)
        c.groups_.push_back(view_matrix(wt.f32() + g * cout_g * cols, cout_g, cols, nullptr));
    if (w.has(module + ".bias")) {
        const TensorView b = w.f32(module + ".bias", {c.c_out_});
        c.bias_.assign(b.f32(), b.f32() + c.c_out_);
    }
    if (c.k_ < 1 || c.a_.stride < 1 || c.a_.dilation < 1)
        throw ShapeError(c.name_ + ": kernel " + std::to_string(c.k_) + " out of range");
    return c;
}

int64_t Conv::out_length(int64_t n) const {
    if (lane_ == Lane::kInt8) return q_.out_length(n);
    return conv_out_length(name_, n, k_, a_);
}

void Conv::forward(const std::vector<float>& x, int64_t n, std::vector<float>& y,
                   ThreadPool* pool) const {
    if (int64_t(x.size()) != c_in_ * n)
        throw ShapeError(name_ + ": input of " + std::to_string(x.size()) + " values, expected " +
                         std::to_string(c_in_) + " x " + std::to_string(n));
    y.resize(size_t(c_out_ * out_length(n)));
    forward(x.data(), n, y.data(), pool);
}

void Conv::forward(const float* x, int64_t n, float* y, ThreadPool* pool,
                   const QuantRange* range) const {
    if (lane_ == Lane::kInt8)
        q_.forward(x, n, y, pool, range);
    else
        forward_float(x, n, y, pool);
}

void Conv::forward_float(const float* x, int64_t n, float* y, ThreadPool* pool) const {
    const int64_t lout = out_length(n);
    const int64_t groups = a_.groups, cin_g = c_in_ / groups, cout_g = c_out_ / groups;
    const int64_t cols = cin_g * k_;
    const int64_t block = std::min(kFloatConvBlock, lout);
    std::vector<float> a(size_t(block * cols)), out(size_t(block * cout_g));
    for (int64_t l0 = 0; l0 < lout; l0 += block) {
        const int64_t nl = std::min(block, lout - l0);
        for (int64_t g = 0; g < groups; ++g) {
            for (int64_t i = 0; i < nl; ++i) {   // im2col: row i = [ci * K + tap], zero padded
                float* row = &a[size_t(i * cols)];
                const int64_t base = (l0 + i) * a_.stride - a_.pad_left;
                for (int64_t ci = 0; ci < cin_g; ++ci) {
                    const float* src = x + (g * cin_g + ci) * n;
                    for (int64_t tap = 0; tap < k_; ++tap) {
                        const int64_t pos = base + tap * a_.dilation;
                        row[ci * k_ + tap] = pos >= 0 && pos < n ? src[pos] : 0.0f;
                    }
                }
            }
            groups_[size_t(g)].forward(a.data(), nl, out.data(), pool);
            for (int64_t co = 0; co < cout_g; ++co) {
                const int64_t r = g * cout_g + co;
                const float b = bias_.empty() ? 0.0f : bias_[size_t(r)];
                float* dst = y + r * lout + l0;
                for (int64_t i = 0; i < nl; ++i) dst[i] = out[size_t(i * cout_g + co)] + b;
            }
        }
    }
}

// ============================================================================ Embedding

Embedding Embedding::load(const KokoroWeights& w, const std::string& module) {
    Embedding e;
    const std::string wname = module + ".weight";
    e.lane_ = lane_of(w, wname);
    e.name_ = w.path() + ": " + module;
    if (e.lane_ == Lane::kInt8) {
        e.q_ = QEmbedding::load(w, module);
        e.rows_ = e.q_.rows();
        e.dim_ = e.q_.dim();
        return e;
    }
    const TensorView t = w.f32(wname, {-1, -1});
    e.rows_ = t.dim(0);
    e.dim_ = t.dim(1);
    e.table_ = t.f32();
    return e;
}

void Embedding::lookup(const int64_t* ids, int64_t n, float* out) const {
    if (lane_ == Lane::kInt8) {
        q_.lookup(ids, n, out);
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= rows_)
            throw ShapeError(name_ + ": id " + std::to_string(ids[i]) + " at position " +
                             std::to_string(i) + " is outside the table's " +
                             std::to_string(rows_) + " rows");
        std::copy(table_ + ids[i] * dim_, table_ + (ids[i] + 1) * dim_, out + i * dim_);
    }
}

}  // namespace dasllama::kokoro
