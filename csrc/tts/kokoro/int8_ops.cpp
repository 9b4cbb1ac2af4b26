#include "tts/kokoro/int8_ops.h"
#include "tts/kokoro/no_contract.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "tts/kokoro/parallel.h"

namespace dasllama::kokoro {

namespace {

// Rounds half to even for |v| < 2^22 in the default rounding mode: adding 1.5 * 2^23 leaves no
// fraction bits, so the add rounds, and the subtraction is exact. Quantized values lie in
// [-255, 510], far inside.
constexpr float kRoundMagic = 12582912.0f;
inline float round_half_even_small(float v) { return (v + kRoundMagic) - kRoundMagic; }

// Work at least this large (multiply-adds) is split over the pool; smaller runs on one thread
// (a pool hand-off costs a few microseconds).
constexpr int64_t kParallelMacs = 1 << 16;
constexpr int64_t kConvBlock = 64;   // output positions im2col'd at once per thread
constexpr int64_t kQuantTile = 256;  // positions quantized per channel before the time-major copy

std::string int_text(float v) { return std::to_string(static_cast<double>(v)); }

int32_t integer_zero_point(float zp, const std::string& name) {
    const float r = std::nearbyint(zp);
    if (r != zp || r < -255.0f || r > 255.0f)
        throw FormatError(name + ": weight zero point " + int_text(zp) +
                          " is not an integer in [-255, 255]");
    return static_cast<int32_t>(r);
}

PackedInt8 pack(const int8_t* w, int64_t rows, int64_t k, bool k_major, const float* zp,
                const float* scale, int64_t n_params, int64_t groups, const std::string& name) {
    if (n_params != 1 && n_params != rows)
        throw ShapeError(name + ": " + std::to_string(n_params) +
                         " zero points / scales for " + std::to_string(rows) + " outputs");
    if (k < 1 || k > kMaxInt8K)
        throw ShapeError(name + ": " + std::to_string(k) + " inputs per output; the exact 32-bit "
                         "sums allow 1 to " + std::to_string(kMaxInt8K));
    PackedInt8 p;
    p.rows = rows;
    p.k = k;
    p.kp = int8_padded(k);
    p.groups = groups;
    p.group_rows = rows / groups;
    p.kernels = &int8_kernels();
    p.sums.assign(size_t(rows), 0);
    p.zp.resize(size_t(rows));
    p.scale.resize(size_t(rows));
    std::vector<int8_t> plain(size_t(rows * p.kp), 0);
    for (int64_t r = 0; r < rows; ++r) {
        int32_t s = 0;
        int8_t* dst = &plain[size_t(r * p.kp)];
        for (int64_t i = 0; i < k; ++i) {
            const int8_t v = k_major ? w[i * rows + r] : w[r * k + i];
            dst[i] = v;
            s += v;
        }
        p.sums[size_t(r)] = s;
        const int64_t j = n_params == 1 ? 0 : r;
        p.zp[size_t(r)] = integer_zero_point(zp[j], name);
        p.scale[size_t(r)] = scale[j];
    }
    p.w.assign(size_t(groups * p.group_stride() * p.kp), 0);
    for (int64_t g = 0; g < groups; ++g)
        p.kernels->pack(&plain[size_t(g * p.group_rows * p.kp)], p.group_rows, p.kp,
                        &p.w[size_t(g * p.group_stride() * p.kp)]);
    return p;
}

// c [m, n] = a [m, kp] times the packed rows b, split over the pool by rows of a or by column
// blocks.
void run_gemm(const Int8Kernels& kern, const uint8_t* a, int64_t lda, const int8_t* b,
              int64_t m, int64_t n, int64_t kp, int32_t* c, int64_t ldc, ThreadPool* pool) {
    const int threads = pool ? pool->size() : 1;
    if (threads <= 1 || m * n * kp < kParallelMacs) {
        kern.gemm(a, lda, b, m, n, kp, c, ldc);
        return;
    }
    const bool split_rows = m >= 4 * threads;
    pool->run([&](int t, int nt) {
        const int64_t total = split_rows ? m : n;
        const int64_t unit = split_rows ? 4 : std::max<int64_t>(16, kern.col_block);
        const int64_t units = (total + unit - 1) / unit;
        const int64_t lo = std::min(total, units * t / nt * unit);
        const int64_t hi = std::min(total, units * (t + 1) / nt * unit);
        if (lo >= hi) return;
        if (split_rows)
            kern.gemm(a + lo * lda, lda, b, hi - lo, n, kp, c + lo * ldc, ldc);
        else
            kern.gemm(a, lda, b + lo * kp, m, hi - lo, kp, c + lo, ldc);
    });
}

}  // namespace

// ============================================================================ quantization

namespace {

void range_generic(const float* x, int64_t n, float& lo_out, float& hi_out, float& zero_out) {
    float lo = 0.0f, hi = 0.0f;   // the range includes 0
    // Eight running minima / maxima (vectorizable); min and max are exact in any order.
    // x * 0 is NaN exactly when x is NaN or infinite: a non-finite activation has no range.
    float l8[8] = {}, h8[8] = {}, z8[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) {
            l8[j] = std::min(l8[j], x[i + j]);
            h8[j] = std::max(h8[j], x[i + j]);
            z8[j] = z8[j] + x[i + j] * 0.0f;
        }
    float zero = 0.0f;
    for (int j = 0; j < 8; ++j) {
        lo = std::min(lo, l8[j]);
        hi = std::max(hi, h8[j]);
        zero = zero + z8[j];
    }
    for (; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        zero = zero + x[i] * 0.0f;
    }
    lo_out = lo;
    hi_out = hi;
    zero_out = zero;
}

void quantize_generic(const float* x, int64_t n, float scale, float zp, uint8_t* q) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = round_half_even_small(x[i] / scale) + zp;
        q[i] = static_cast<uint8_t>(std::clamp(v, 0.0f, static_cast<float>(kQuantMax)));
    }
}

void rescale_generic(const int32_t* acc, int64_t m, int64_t n, const int32_t* col, int32_t zw,
                     const int64_t* qsum, const double* fb, float s, float* out, int64_t ldo) {
    for (int64_t i = 0; i < m; ++i) {
        const uint32_t zq = uint32_t(zw) * uint32_t(int32_t(qsum[i]));
        for (int64_t j = 0; j < n; ++j) {
            const uint32_t u = uint32_t(acc[i * n + j]) + uint32_t(col[j]) - zq;
            const double sum = static_cast<double>(static_cast<int32_t>(u)) + fb[j];
            out[j * ldo + i] = static_cast<float>(sum) * s;
        }
    }
}

const Int8Vector kVectorGeneric{"generic", range_generic, quantize_generic, rescale_generic};

}  // namespace

const Int8Vector& int8_vector() {
    static const Int8Vector* best = [] {
        const Int8Vector* v = int8_vector_avx512();
        return v && cpu_features().allows(v->isa) ? v : &kVectorGeneric;
    }();
    return *best;
}

QuantParams quant_params(const float* x, int64_t n) {
    float lo = 0.0f, hi = 0.0f, zero = 0.0f;
    int8_vector().range(x, n, lo, hi, zero);
    if (zero != 0.0f)
        throw ShapeError("DynamicQuantizeLinear: the activations hold NaN or infinity (" +
                         std::to_string(n) + " values)");
    QuantParams p;
    p.scale = hi == lo ? 1.0f : (hi - lo) / static_cast<float>(kQuantMax);
    const float z = std::clamp(0.0f - lo / p.scale, 0.0f, static_cast<float>(kQuantMax));
    p.zero_point = static_cast<int32_t>(round_half_even_small(z));
    return p;
}

void quantize(const float* x, int64_t n, const QuantParams& p, uint8_t* q) {
    int8_vector().quantize(x, n, p.scale, static_cast<float>(p.zero_point), q);
}

QuantParams dynamic_quantize(const float* x, int64_t n, uint8_t* q) {
    const QuantParams p = quant_params(x, n);
    quantize(x, n, p, q);
    return p;
}

// ============================================================================ kernels

void int8_pack_rows(const int8_t* rows, int64_t n, int64_t kp, int8_t* out) {
    std::copy(rows, rows + n * kp, out);
}

void int8_gemm_generic(const uint8_t* a, int64_t lda, const int8_t* b, int64_t m, int64_t n,
                       int64_t kp, int32_t* c, int64_t ldc) {
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            const uint8_t* x = a + i * lda;
            const int8_t* w = b + j * kp;
            int32_t s = 0;
            for (int64_t k = 0; k < kp; ++k) s += int32_t(x[k]) * int32_t(w[k]);
            c[i * ldc + j] = s;
        }
}

namespace {

const Int8Kernels kGeneric{"generic", 1, int8_pack_rows, int8_gemm_generic};

std::vector<const Int8Kernels*> all_kernels() {
    std::vector<const Int8Kernels*> out;
    for (const Int8Kernels* t : {int8_kernels_amx(), int8_kernels_avx512(), int8_kernels_avx2()})
        if (t && cpu_features().allows(t->isa)) out.push_back(t);
    out.push_back(&kGeneric);
    return out;
}

}  // namespace

const Int8Kernels& int8_kernels() {
    static const Int8Kernels* best = all_kernels().front();
    return *best;
}

const Int8Kernels& int8_kernels(const std::string& isa) {
    for (const Int8Kernels* t : all_kernels())
        if (isa == t->isa) return *t;
    throw Error("kokoro int8 kernels: level '" + isa + "' is not available on this CPU (" +
                cpu_features().isa() + ")");
}

std::vector<std::string> int8_kernel_levels() {
    std::vector<std::string> out;
    for (const Int8Kernels* t : all_kernels()) out.emplace_back(t->isa);
    return out;
}

#if !defined(__x86_64__) && !defined(_M_X64)
const Int8Kernels* int8_kernels_avx2() { return nullptr; }
const Int8Kernels* int8_kernels_avx512() { return nullptr; }
const Int8Kernels* int8_kernels_amx() { return nullptr; }
const Int8Vector* int8_vector_avx512() { return nullptr; }
#endif

// ============================================================================ QLinear

QLinear::QLinear(const int8_t* w, int64_t k, int64_t n, const float* zp, const float* scale,
                 int64_t n_params, const float* bias, const std::string& name)
    : name_(name), p_(pack(w, n, k, /*k_major=*/true, zp, scale, n_params, 1, name)) {
    if (bias) bias_.assign(bias, bias + n);
}

QLinear QLinear::load(const KokoroWeights& w, const std::string& module, bool with_bias) {
    const TensorView wt = w.i8(module + ".weight", {-1, -1});
    const int64_t k = wt.dim(0), n = wt.dim(1);
    const TensorView zp = w.f32(module + ".weight_zp", {-1});
    const TensorView sc = w.f32(module + ".weight_scale", {zp.dim(0)});
    const float* bias = nullptr;
    if (with_bias && w.has(module + ".bias")) bias = w.f32(module + ".bias", {n}).f32();
    return QLinear(wt.i8(), k, n, zp.f32(), sc.f32(), zp.dim(0), bias, w.path() + ": " + module);
}

void QLinear::forward(const float* x, int64_t m, float* y, ThreadPool* pool) const {
    const int64_t k = p_.k, kp = p_.kp;
    std::unique_ptr<uint8_t[]> q(new uint8_t[size_t(m * kp)]);   // rows zero-padded below
    std::vector<int64_t> sums(static_cast<size_t>(m));
    const QuantParams qp = quant_params(x, m * k);
    parallel_rows(pool, m, k, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
            uint8_t* row = &q[size_t(i * kp)];
            quantize(x + i * k, k, qp, row);
            std::fill(row + k, row + kp, uint8_t(0));
            int64_t s = 0;
            for (int64_t j = 0; j < k; ++j) s += row[j];
            sums[size_t(i)] = s;
        }
    });
    forward_quantized(q.get(), sums.data(), qp, m, y, pool);
}

void QLinear::forward_quantized(const uint8_t* q, const int64_t* qsums, const QuantParams& qp,
                                int64_t m, float* y, ThreadPool* pool) const {
    const int64_t n = p_.rows;
    std::unique_ptr<int32_t[]> acc(new int32_t[size_t(m * n)]);
    run_gemm(*p_.kernels, q, p_.kp, p_.group(0), m, n, p_.kp, acc.get(), n, pool);
    // The zero points folded in 32-bit integers, modulo 2^32: v = raw - zx sum(w) + K zx zw -
    // zw sum(q), whose exact value is below 255 * 255 * K < 2^31 (kMaxInt8K), so the wrapped
    // sum is the exact one.
    std::vector<float> cs(static_cast<size_t>(n));
    std::vector<int32_t> col(static_cast<size_t>(n));
    const int32_t zx = qp.zero_point;
    for (int64_t j = 0; j < n; ++j) {
        cs[size_t(j)] = qp.scale * p_.scale[size_t(j)];
        col[size_t(j)] = int32_t(int64_t(p_.k) * zx * p_.zp[size_t(j)] -
                                 int64_t(zx) * p_.sums[size_t(j)]);
    }
    const int32_t* zw = p_.zp.data();
    const float* bias = bias_.empty() ? nullptr : bias_.data();
    parallel_rows(pool, m, n, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
            const int32_t qs = static_cast<int32_t>(qsums[i]);
            const int32_t* a = &acc[size_t(i * n)];
            float* out = y + i * n;
            for (int64_t j = 0; j < n; ++j) {   // modulo 2^32: the result itself fits
                const uint32_t u = uint32_t(a[j]) + uint32_t(col[size_t(j)]) -
                                   uint32_t(zw[j]) * uint32_t(qs);
                out[j] = static_cast<float>(static_cast<int32_t>(u)) * cs[size_t(j)];
            }
            if (bias)
                for (int64_t j = 0; j < n; ++j) out[j] = out[j] + bias[j];
        }
    });
}

// ============================================================================ QConv

QConv::QConv(const int8_t* w, int64_t c_out, int64_t c_in, int64_t k, const ConvAttrs& attrs,
             float zp, float scale, const float* bias, const std::string& name)
    : name_(name), c_out_(c_out), c_in_(c_in), k_(k), a_(attrs) {
    if (a_.groups < 1 || c_in % a_.groups || c_out % a_.groups)
        throw ShapeError(name + ": groups " + std::to_string(a_.groups) + " do not divide " +
                         std::to_string(c_in) + " inputs and " + std::to_string(c_out) +
                         " outputs");
    // The packed rows are tap-major ([tap][c_in / groups]), the file's are channel-major: a
    // window's im2col row is then one copy of each tap's channels from the time-major input.
    const int64_t cin_g = c_in / a_.groups;
    std::vector<int8_t> tap_major(size_t(c_out * cin_g * k));
    for (int64_t co = 0; co < c_out; ++co)
        for (int64_t ci = 0; ci < cin_g; ++ci)
            for (int64_t tap = 0; tap < k; ++tap)
                tap_major[size_t((co * k + tap) * cin_g + ci)] = w[(co * cin_g + ci) * k + tap];
    p_ = pack(tap_major.data(), c_out, cin_g * k, /*k_major=*/false, &zp, &scale, 1, a_.groups,
              name);
    if (bias) bias_.assign(bias, bias + c_out);
}

QConv QConv::load(const KokoroWeights& w, const std::string& module) {
    const ConvAttrs a = w.conv(module);
    const TensorView wt = w.i8(module + ".weight", {-1, -1, -1});
    const int64_t c_out = wt.dim(0), c_in = wt.dim(1) * a.groups, k = wt.dim(2);
    const float zp = w.f32(module + ".weight_zp", {1}).f32()[0];
    const float sc = w.f32(module + ".weight_scale", {1}).f32()[0];
    const float* bias = w.has(module + ".bias") ? w.f32(module + ".bias", {c_out}).f32() : nullptr;
    return QConv(wt.i8(), c_out, c_in, k, a, zp, sc, bias, w.path() + ": " + module);
}

int64_t QConv::out_length(int64_t n) const {
    return conv_out_length(name_, n, k_, a_);
}

void QConv::forward(const std::vector<float>& x, int64_t n, std::vector<float>& y,
                    ThreadPool* pool) const {
    if (int64_t(x.size()) != c_in_ * n)
        throw ShapeError(name_ + ": input of " + std::to_string(x.size()) + " values, expected " +
                         std::to_string(c_in_) + " x " + std::to_string(n));
    y.resize(size_t(c_out_ * out_length(n)));
    forward(x.data(), n, y.data(), pool);
}

void QConv::forward(const float* x, int64_t n, float* y, ThreadPool* pool) const {
    const int64_t lout = out_length(n);
    const QuantParams qp = quant_params(x, c_in_ * n);
    const float s = qp.scale * p_.scale[0];
    std::vector<double> fb(size_t(c_out_), 0.0);   // the graph's integer bias
    for (int64_t co = 0; co < c_out_ && !bias_.empty(); ++co)
        fb[size_t(co)] = std::floor(bias_[size_t(co)] / s);
    const int64_t groups = a_.groups, cin_g = c_in_ / groups, cout_g = c_out_ / groups;
    const int64_t kk = p_.k, kp = p_.kp;
    const uint8_t zx = static_cast<uint8_t>(qp.zero_point);

    // The input time-major and padded (the zero point outside the signal): position p of the
    // padded signal holds its C_in values in one row, and gsum its per-group sums, so a
    // window's im2col row is one copy per tap and its sum one addition per tap.
    // Only the padding rows are filled here: the quantize pass below writes every row of the
    // signal (a fill of the whole buffer was a second pass over each convolution's input).
    const int64_t padded = n + a_.pad_left + a_.pad_right;
    std::unique_ptr<uint8_t[]> qt(new uint8_t[size_t(padded * c_in_)]);   // not zeroed
    std::fill(qt.get(), qt.get() + a_.pad_left * c_in_, zx);
    std::fill(qt.get() + (n + a_.pad_left) * c_in_, qt.get() + padded * c_in_, zx);
    const Int8Vector& vec = int8_vector();
    const float zpf = static_cast<float>(qp.zero_point);
    parallel_rows(pool, c_in_, n, [&](int64_t c0, int64_t c1) {
        // kQuantTile positions of every channel of the range at a time, then one pass that
        // writes them time-major (rows of the tile read from L1).
        std::vector<uint8_t> q(size_t((c1 - c0) * kQuantTile));
        for (int64_t t0 = 0; t0 < n; t0 += kQuantTile) {
            const int64_t nt = std::min(kQuantTile, n - t0);
            for (int64_t ci = c0; ci < c1; ++ci)
                vec.quantize(x + ci * n + t0, nt, qp.scale, zpf,
                             &q[size_t((ci - c0) * kQuantTile)]);
            for (int64_t t = 0; t < nt; ++t) {
                uint8_t* dst = &qt[size_t((a_.pad_left + t0 + t) * c_in_)];
                for (int64_t ci = c0; ci < c1; ++ci)
                    dst[ci] = q[size_t((ci - c0) * kQuantTile + t)];
            }
        }
    });
    std::vector<int64_t> gsum(size_t(padded * groups));
    parallel_rows(pool, padded, c_in_, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
            for (int64_t g = 0; g < groups; ++g) {
                const uint8_t* row = &qt[size_t(p * c_in_ + g * cin_g)];
                int64_t sum = 0;
                for (int64_t ci = 0; ci < cin_g; ++ci) sum += row[ci];
                gsum[size_t(p * groups + g)] = sum;
            }
    });
    // The zero points' terms that depend on the output alone (int32 modulo 2^32, as
    // QLinear::forward_quantized): col = K zx zw - zx sum(w).
    std::vector<int32_t> col(static_cast<size_t>(c_out_));
    for (int64_t r = 0; r < c_out_; ++r)
        col[size_t(r)] = int32_t(kk * int64_t(qp.zero_point) * p_.zp[size_t(r)] -
                                 int64_t(qp.zero_point) * p_.sums[size_t(r)]);
    const int32_t zw = p_.zp[0];   // one per tensor (the constructor's single zp)

    auto work = [&](int t, int nt) {
        const int64_t blocks = (lout + kConvBlock - 1) / kConvBlock;
        // Written in full before each read (rows past K padded below), so not zeroed.
        std::unique_ptr<uint8_t[]> a(new uint8_t[size_t(kConvBlock * kp)]);
        std::vector<int64_t> sums(static_cast<size_t>(kConvBlock));
        std::unique_ptr<int32_t[]> acc(new int32_t[size_t(kConvBlock * cout_g)]);
        for (int64_t b = blocks * t / nt; b < blocks * (t + 1) / nt; ++b) {
            const int64_t l0 = b * kConvBlock, nl = std::min(kConvBlock, lout - l0);
            for (int64_t g = 0; g < groups; ++g) {
                for (int64_t i = 0; i < nl; ++i) {      // im2col: row i = [tap * cin_g + ci]
                    uint8_t* row = &a[size_t(i * kp)];
                    const int64_t base = (l0 + i) * a_.stride;   // in padded positions
                    int64_t sum = 0;
                    for (int64_t tap = 0; tap < k_; ++tap) {
                        const int64_t pos = base + tap * a_.dilation;
                        std::memcpy(row + tap * cin_g, &qt[size_t(pos * c_in_ + g * cin_g)],
                                    size_t(cin_g));
                        sum += gsum[size_t(pos * groups + g)];
                    }
                    std::fill(row + kk, row + kp, uint8_t(0));
                    sums[size_t(i)] = sum;
                }
                p_.kernels->gemm(a.get(), kp, p_.group(g), nl, cout_g, kp, acc.get(), cout_g);
                const int64_t r0 = g * cout_g;
                vec.rescale(acc.get(), nl, cout_g, &col[size_t(r0)], zw, sums.data(),
                            &fb[size_t(r0)], s, y + r0 * lout + l0, lout);
            }
        }
    };
    const int threads = pool ? pool->size() : 1;
    if (threads <= 1 || lout * c_out_ * kk < kParallelMacs)
        work(0, 1);
    else
        pool->run(work);
}

// ============================================================================ QEmbedding

QEmbedding QEmbedding::load(const KokoroWeights& w, const std::string& module) {
    QEmbedding e;
    const TensorView t = w.i8(module + ".weight", {-1, -1});
    e.name_ = w.path() + ": " + module;
    e.rows_ = t.dim(0);
    e.dim_ = t.dim(1);
    e.w_ = t.i8();
    e.zp_ = w.f32(module + ".weight_zp", {1}).f32()[0];
    e.scale_ = w.f32(module + ".weight_scale", {1}).f32()[0];
    return e;
}

void QEmbedding::lookup(const int64_t* ids, int64_t n, float* out) const {
    for (int64_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= rows_)
            throw ShapeError(name_ + ": id " + std::to_string(ids[i]) + " at position " +
                             std::to_string(i) + " is outside the table's " +
                             std::to_string(rows_) + " rows");
        const int8_t* row = w_ + ids[i] * dim_;
        for (int64_t j = 0; j < dim_; ++j)
            out[i * dim_ + j] = (static_cast<float>(row[j]) - zp_) * scale_;
    }
}

}  // namespace dasllama::kokoro
