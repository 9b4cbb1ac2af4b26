// Kokoro's weight-bearing ops (linear, convolution, embedding), each serving both lanes a file
// can hold: the int8 graph's (I8 weights with scales and zero points: int8_ops.h, the graph's
// integer arithmetic) and float (F32 weights: hexgrad's PyTorch checkpoint converted by
// dasllama.convert.kokoro_torch, or a float ONNX graph; no converter writes F16). Each op picks its lane once, at load,
// from its weight tensor's type (lane_of); the stage code above never branches on it. This is
// the reference's dispatch (ReferenceKokoro.linear / qconv / embed).
//
// The float lane is float32 arithmetic: linears and convolutions are products through the
// project's CPU matmul (cpu/matmul.h, Precision::kF32; cpu::dot_f32 rows when no pool is given,
// as in an LSTM step), convolutions as im2col blocks times the [C_out, C_in / groups * K]
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "tts/kokoro/int8_ops.h"
#include "tts/kokoro/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::kokoro {

enum class Lane {
    kInt8,    // I8 weights: the int8 graph's integer arithmetic
    kFloat,   // F32 weights: float32 arithmetic
};

// The lane of the tensor `name`: kInt8 for I8, kFloat for F32. MissingTensor when absent,
// FormatError naming the tensor and its type for any other type.
Lane lane_of(const KokoroWeights& w, const std::string& name);

// A float32 matrix for the CPU matmul, with the floats it views kept alive.
struct FloatMatrix {
    cpu::WeightMatrix m;                          // rows outputs x cols inputs
    std::shared_ptr<const std::vector<float>> owned;   // the floats when copied (else a view
                                                       // of the file's mapping)

    // y [n_rows, m.rows] = x [n_rows, m.cols] W^T; the pool's threads when pool is given, else
    // cpu::dot_f32 row by row on the calling thread.
    void forward(const float* x, int64_t n_rows, float* y, ThreadPool* pool) const;
};

// ---------------------------------------------------------------------------- linear
// y = x W + b with W (K, N) as the file holds it (the layout's (in, out)).
class Linear {
public:
    Linear() = default;
    // The module's M.weight [, M.bias when with_bias and present], plus M.weight_zp and
    // M.weight_scale for an I8 weight.
    static Linear load(const KokoroWeights& w, const std::string& module, bool with_bias = true);
    // A float-lane linear from w (K, N) row-major floats (copied) and an optional bias [N].
    static Linear from_floats(const float* w, int64_t k, int64_t n, const float* bias,
                              const std::string& name);
    // An int8-lane linear around a packed QLinear.
    static Linear from_int8(QLinear q);

    Lane lane() const { return lane_; }
    int64_t in() const { return k_; }
    int64_t out() const { return n_; }
    bool has_bias() const { return lane_ == Lane::kInt8 ? q_.has_bias() : !bias_.empty(); }
    const std::string& name() const { return name_; }

    // x [m, K] -> y [m, N]. The int8 lane quantizes x as one tensor (DynamicQuantizeLinear).
    // pool nullptr: on the calling thread only.
    void forward(const float* x, int64_t m, float* y, ThreadPool* pool) const;

private:
    Lane lane_ = Lane::kInt8;
    std::string name_;
    int64_t k_ = 0, n_ = 0;
    QLinear q_;
    FloatMatrix f_;               // [N, K]: W transposed for the matmul
    std::vector<float> bias_;
};

// ---------------------------------------------------------------------------- convolution
// A 1-D convolution x [C_in, n] -> y [C_out, L'], weight [C_out, C_in / groups, K], attributes
// from kokoro.conv.M.
class Conv {
public:
    Conv() = default;
    // M.weight, [M.bias], kokoro.conv.M, plus M.weight_zp / M.weight_scale for I8.
    static Conv load(const KokoroWeights& w, const std::string& module);

    Lane lane() const { return lane_; }
    int64_t c_in() const { return c_in_; }
    int64_t c_out() const { return c_out_; }
    int64_t kernel() const { return k_; }
    const ConvAttrs& attrs() const { return a_; }
    // Output length for an input of n positions; ShapeError naming the module when none.
    int64_t out_length(int64_t n) const;

    // range: x's quantization range when the caller has it (the int8 lane then skips its
    // range pass; the float lane ignores it).
    void forward(const float* x, int64_t n, float* y, ThreadPool* pool,
                 const QuantRange* range = nullptr) const;
    void forward(const std::vector<float>& x, int64_t n, std::vector<float>& y,
                 ThreadPool* pool) const;

private:
    void forward_float(const float* x, int64_t n, float* y, ThreadPool* pool) const;

    Lane lane_ = Lane::kInt8;
    std::string name_;
    int64_t c_out_ = 0, c_in_ = 0, k_ = 0;
    ConvAttrs a_;
    QConv q_;
    std::vector<FloatMatrix> groups_;   // per group: [C_out / groups, C_in / groups * K]
    std::vector<float> bias_;
};

// ---------------------------------------------------------------------------- embedding
class Embedding {
public:
    Embedding() = default;
    // M.weight [rows, dim] (+ M.weight_zp, M.weight_scale for I8).
    static Embedding load(const KokoroWeights& w, const std::string& module);

    Lane lane() const { return lane_; }
    int64_t rows() const { return rows_; }
    int64_t dim() const { return dim_; }
    // out [n, dim] for ids [n]; ShapeError naming the table for an id out of range.
    void lookup(const int64_t* ids, int64_t n, float* out) const;

private:
    Lane lane_ = Lane::kInt8;
    std::string name_;
    int64_t rows_ = 0, dim_ = 0;
    QEmbedding q_;
    const float* table_ = nullptr;
};

}  // namespace dasllama::kokoro
