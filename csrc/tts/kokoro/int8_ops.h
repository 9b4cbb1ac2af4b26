// The int8 operators of Kokoro's quantized ONNX graph, with the graph's arithmetic (the NumPy
// reference is python/dasllama/reference/kokoro_ops.py; the rules below are ONNX's):
//
// - DynamicQuantizeLinear over a whole tensor: range [min(x, 0), max(x, 0)], scale =
//   (max - min) / 255 (1 when the range is empty), zero point = round(0 - min / scale) clamped
//   to [0, 255], q = clamp(round(x / scale) + zero point, 0, 255); round is half to even; all
//   float32 (a division, not a multiply by the reciprocal).
// - MatMulInteger (QLinear): y = float(sum_k (q - zx)(w - zw)) * (x_scale * w_scale) [+ bias],
//   weight zero points and scales per tensor or per output column.
// - ConvInteger (QConv): the same sums over the taps, padding holding the activation's zero
//   point (q - zx = 0), plus the graph's integer bias floor(b / (x_scale * w_scale)), then the
//   rescale.
//
// The integer sums are exact (int32: |q - zx| <= 255, |w - zw| <= 255, K < 33000), so any
// summation order gives the reference's bits. They run as u8 x s8 -> i32 dot products (AMX
// tdpbusd tiles, AVX-512 VNNI vpdpbusd, AVX2 sign-extended pmaddwd, or plain C++), picked at
// run time (int8_kernels()), on the thread pool; the zero points are folded in afterwards from
// row and column sums:
//     sum (q - zx)(w - zw) = sum q w - zw sum q - zx sum w + K zx zw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

constexpr int64_t kQuantMax = 255;     // uint8 activations
constexpr int64_t kInt8KAlign = 64;    // packed rows are padded with zeros to this many bytes
                                       // (one 512-bit vector)
constexpr int64_t kMaxInt8K = 33000;   // inputs per output: 255 * 255 * K must stay below 2^31
                                       // for the 32-bit sums to be exact

struct QuantParams {
    float scale = 1.0f;
    int32_t zero_point = 0;
};

// What DynamicQuantizeLinear's parameters depend on, as Int8Vector::range gives it: lo =
// min(0, x), hi = max(0, x), zero = the sum of x * 0 (nonzero when x holds NaN or inf). A pass
// that writes x can gather it on the way (AdaIN1d::forward_snake) and spare the reader a pass.
struct QuantRange {
    float lo = 0.0f, hi = 0.0f, zero = 0.0f;
};

// DynamicQuantizeLinear's scale and zero point for n values.
QuantParams quant_params(const float* x, int64_t n);
// ... from their range (n: for the message when the range says NaN or infinity).
QuantParams quant_params(const QuantRange& r, int64_t n);
// q[i] = clamp(round_half_even(x[i] / scale) + zero_point, 0, 255).
void quantize(const float* x, int64_t n, const QuantParams& p, uint8_t* q);
// Both: the parameters of x, and x quantized into q.
QuantParams dynamic_quantize(const float* x, int64_t n, uint8_t* q);

// --------------------------------------------------------------------------- the kernels
// c[i * ldc + j] = sum_k a[i * lda + k] * b_j[k] for i < m, j < n, k < kp: a uint8 rows padded
// with zeros to kp (a multiple of kInt8KAlign), b_j int8 weight rows in the level's packed
// layout (pack()). Layouts: col_block 1 is plain rows of kp bytes; col_block 16 (VNNI) holds
// 16 rows at a time as kp / 4 groups of [16 rows x 4 bytes], so one 512-bit load feeds 16
// outputs. Either way the rows of block j0 (a multiple of col_block) start at b + j0 * kp.
struct Int8Kernels {
    const char* isa;
    int64_t col_block;
    // rows [n, kp] plain -> out (padded_rows(n) * kp bytes, zero rows past n)
    void (*pack)(const int8_t* rows, int64_t n, int64_t kp, int8_t* out);
    void (*gemm)(const uint8_t* a, int64_t lda, const int8_t* b, int64_t m, int64_t n,
                 int64_t kp, int32_t* c, int64_t ldc);
    // gemm with a's rows gathered: element (i, k) at a[i * lda + koff[k / 64] + k % 64], m a
    // multiple of 32, so a convolution's windows are read from its time-major input where they
    // lie (koff: each 64 bytes of k's tap and channel offset) instead of being copied into
    // im2col rows. nullptr at levels without it.
    void (*gemm_gather)(const uint8_t* a, int64_t lda, const int64_t* koff, const int8_t* b,
                        int64_t m, int64_t n, int64_t kp, int32_t* c, int64_t ldc);
    int64_t padded_rows(int64_t n) const { return (n + col_block - 1) / col_block * col_block; }
};
const Int8Kernels& int8_kernels();                    // the best this CPU runs
const Int8Kernels& int8_kernels(const std::string& isa);   // by level; Error if unavailable
std::vector<std::string> int8_kernel_levels();        // the levels this CPU runs, best first
void int8_pack_rows(const int8_t* rows, int64_t n, int64_t kp, int8_t* out);   // col_block 1
void int8_gemm_generic(const uint8_t* a, int64_t lda, const int8_t* b, int64_t m, int64_t n,
                       int64_t kp, int32_t* c, int64_t ldc);
const Int8Kernels* int8_kernels_avx2();     // nullptr where not built
const Int8Kernels* int8_kernels_avx512();
const Int8Kernels* int8_kernels_amx();      // tdpbusd tiles on the AVX-512 level's packing

// --------------------------------------------------------------------------- element-wise
// The quantization's passes and the convolution's rescale at one ISA level. Every level does
// the same float32 / float64 operations per element (a division, the round-half-even add, a
// clamp; an int32 fold, a float64 add, one rounding to float32 and a product), so the levels
// give the same bits.
struct Int8Vector {
    const char* isa;
    // lo = min(0, x), hi = max(0, x), zero = the sum of x * 0 (not 0 when x holds NaN or inf)
    void (*range)(const float* x, int64_t n, float& lo, float& hi, float& zero);
    // q[i] = clamp(round_half_even(x[i] / scale) + zp, 0, 255)
    void (*quantize)(const float* x, int64_t n, float scale, float zp, uint8_t* q);
    // out[j * ldo + i] = float(double(int32(acc[i * n + j] + col[j] - zw * qsum[i])) + fb[j])
    // * s (modulo 2^32: the exact sum fits), for i < m, j < n: transposed, so a convolution's
    // time-major sums land in its channel-major output.
    void (*rescale)(const int32_t* acc, int64_t m, int64_t n, const int32_t* col, int32_t zw,
                    const int64_t* qsum, const double* fb, float s, float* out, int64_t ldo);
    // The quantization into a convolution's time-major rows: for positions t in [t0, t1) of
    // channel-major x [c, ld], q[(t - t0) * c + ci] = quantize(x[ci * ld + t]) (as quantize
    // above) and sums[t - t0] = the sum over ci of that row's bytes.
    void (*quantize_time_major)(const float* x, int64_t c, int64_t ld, int64_t t0, int64_t t1,
                                float scale, float zp, uint8_t* q, int64_t* sums);
};
const Int8Vector& int8_vector();            // the best this CPU runs
const Int8Vector* int8_vector_avx512();     // nullptr where not built

// Pads k to the packed row length.
inline int64_t int8_padded(int64_t k) { return (k + kInt8KAlign - 1) / kInt8KAlign * kInt8KAlign; }

// --------------------------------------------------------------------------- weights
// Integer weights packed as rows of kp int8 (one per output), with their column sums and
// integer zero points, and float32 scales, per output (a per-tensor value is repeated).
struct PackedInt8 {
    int64_t rows = 0, k = 0, kp = 0;
    int64_t groups = 1, group_rows = 0;   // rows per group, and their packed stride in rows
    const Int8Kernels* kernels = nullptr; // the level `w` is packed for
    std::vector<int8_t> w;        // per group: [padded group_rows, kp] in kernels' layout
    std::vector<int32_t> sums;    // sum_k w[r, k]
    std::vector<int32_t> zp;      // [rows]
    std::vector<float> scale;     // [rows]

    const int8_t* group(int64_t g) const { return &w[size_t(g * group_stride() * kp)]; }
    int64_t group_stride() const { return kernels->padded_rows(group_rows); }

    // sum over k of (q[k] - zx)(w[r, k] - zw[r]) from a's raw product and row sum.
    int64_t fold(int64_t raw, int64_t qsum, int32_t zx, int64_t r) const {
        return raw - int64_t(zp[r]) * qsum - int64_t(zx) * sums[r] + k * int64_t(zx) * zp[r];
    }
};

// --------------------------------------------------------------------------- MatMulInteger
class QLinear {
public:
    QLinear() = default;
    // w: [K, N] int8 as the file holds it; zp and scale: n_params (1 or N) floats whose zero
    // points are integers; bias: N floats or nullptr. name is for error messages.
    QLinear(const int8_t* w, int64_t k, int64_t n, const float* zp, const float* scale,
            int64_t n_params, const float* bias, const std::string& name);
    // The module's M.weight, M.weight_zp, M.weight_scale [, M.bias when with_bias and present].
    static QLinear load(const KokoroWeights& w, const std::string& module, bool with_bias = true);

    int64_t in() const { return p_.k; }
    int64_t out() const { return p_.rows; }
    bool has_bias() const { return !bias_.empty(); }
    const std::string& name() const { return name_; }

    // x [m, K] float32 (quantized as one tensor) -> y [m, N].
    void forward(const float* x, int64_t m, float* y, ThreadPool* pool) const;
    // Rows already quantized: q [m, kp] uint8 (zero padded past K), their row sums and
    // parameters -> y [m, N]. No threads when pool is nullptr.
    void forward_quantized(const uint8_t* q, const int64_t* qsums, const QuantParams& p,
                           int64_t m, float* y, ThreadPool* pool) const;

private:
    std::string name_;
    PackedInt8 p_;
    std::vector<float> bias_;
};

// --------------------------------------------------------------------------- ConvInteger
class QConv {
public:
    QConv() = default;
    // w: [C_out, C_in / groups, K] int8; zp and scale: one value each (the file's per-tensor
    // ones); bias: C_out floats or nullptr.
    QConv(const int8_t* w, int64_t c_out, int64_t c_in, int64_t k, const ConvAttrs& attrs,
          float zp, float scale, const float* bias, const std::string& name);
    // M.weight, M.weight_zp, M.weight_scale [, M.bias] and kokoro.conv.M.
    static QConv load(const KokoroWeights& w, const std::string& module);

    int64_t c_in() const { return c_in_; }
    int64_t c_out() const { return c_out_; }
    int64_t kernel() const { return k_; }
    const ConvAttrs& attrs() const { return a_; }
    // Output length for an input of n positions; ShapeError naming the module when none.
    int64_t out_length(int64_t n) const;

    // x [C_in, n] float32 -> y [C_out, out_length(n)]. range: x's quantization range when the
    // caller has it (QuantRange), else nullptr and the convolution takes it.
    void forward(const float* x, int64_t n, float* y, ThreadPool* pool,
                 const QuantRange* range = nullptr) const;
    void forward(const std::vector<float>& x, int64_t n, std::vector<float>& y,
                 ThreadPool* pool) const;

private:
    std::string name_;
    int64_t c_out_ = 0, c_in_ = 0, k_ = 0;
    ConvAttrs a_;
    PackedInt8 p_;                 // rows C_out, k = C_in / groups * K
    std::vector<float> bias_;
};

// --------------------------------------------------------------------------- embeddings
// A quantized embedding table: row r dequantized as (q - zp) * scale.
class QEmbedding {
public:
    QEmbedding() = default;
    static QEmbedding load(const KokoroWeights& w, const std::string& module);
    int64_t rows() const { return rows_; }
    int64_t dim() const { return dim_; }
    // out [n, dim] for ids [n]; ShapeError naming the table for an id out of range.
    void lookup(const int64_t* ids, int64_t n, float* out) const;

private:
    std::string name_;
    int64_t rows_ = 0, dim_ = 0;
    const int8_t* w_ = nullptr;
    float zp_ = 0.0f, scale_ = 1.0f;
};

}  // namespace dasllama::kokoro
