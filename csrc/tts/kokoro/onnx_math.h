// Float32 helpers of Kokoro's graph, computed as the NumPy reference computes them
// (python/dasllama/reference/kokoro_ops.py), which follows onnxruntime's CPU kernels where the
// last bit decides a later quantization step:
//
// - logistic and tanh: MLAS's rational approximations in x^2 (inputs clamped to [-18, 18] and
//   [-9, 9]), Horner steps as "fused" multiply-adds the way the reference forms them: the
//   product of two float32 values exact in double, one rounding of the sum to double, one to
//   float32 (so a double rounding, as in the reference).
// - FastGelu: v = x + bias; v * 0.5 * (1 + tanh(v * (sqrt(2/pi) + 0.044715 sqrt(2/pi) v^2))).
// - LayerNorm over the last axis with the x86-64 kernel's 8 float32 lane sums.
// - the AdaIN instance norm over time with its reductions in double.
// - softmax with expf (the reference's exp is NumPy's: last bits may differ).
// Every function is plain C++ in a file built without FMA contraction, so its roundings are
// the ones written.
#pragma once

#include <cstdint>

namespace dasllama::kokoro {

float mlas_logistic(float x);
float mlas_tanh(float x);
// Over arrays, through the best activation kernels this CPU runs (same bits at every level).
void logistic(const float* x, int64_t n, float* out);
void tanh_mlas(const float* x, int64_t n, float* out);

struct ActivationKernels {
    const char* isa;
    void (*logistic)(const float* x, int64_t n, float* out);
    void (*tanh)(const float* x, int64_t n, float* out);
    void (*instance_norm)(const float* x, int64_t c, int64_t l, float eps, float* out);
    // AdaIN then Snake in one pass per row, for the AdaIN1d + Snake pairs of the generator's
    // residual blocks: row r of out = snake_r((h_gamma[r] + 1) * instance_norm(x_r) +
    // h_beta[r]) with alpha[r] (the snake of snake_avx512.h), and range = {min(0, out),
    // max(0, out), the sum of out * 0} over the rows written (Int8Vector::range's three
    // values, for the int8 convolution that reads out). Each step is the unfused chain's
    // instruction (instance_norm here, AdaIN1d's scalar affine, nn::snake's AVX-512 row), so
    // the bits are the same. nullptr at levels without it: the caller runs the chain unfused.
    void (*adain_snake)(const float* x, int64_t rows, int64_t l, float eps, const float* h_gamma,
                        const float* h_beta, const float* alpha, float* out, float range[3]);
};
const ActivationKernels& activation_kernels();
const ActivationKernels& activation_kernels(const char* isa);   // Error if not available
const ActivationKernels* activation_kernels_avx512();   // nullptr where not built

// out[r, j] = FastGelu(x[r, j] + bias[j]) for rows of n values; out may equal x.
void fast_gelu(const float* x, const float* bias, int64_t rows, int64_t n, float* out);
// GELU in its erf form (transformers' "gelu"), the reference's gelu_erf: v = x + bias in
// float32, out = v * 0.5 * (1 + float(erf(double(v) / sqrt(2)))).
void gelu_erf(const float* x, const float* bias, int64_t rows, int64_t n, float* out);
// LayerNormalization of rows of n values (weight, bias: n values); out may equal x.
void layer_norm_lanes(const float* x, const float* weight, const float* bias, int64_t rows,
                      int64_t n, float eps, float* out);
// Each of c rows of length l normalized over its l values: (x - mean) / sqrt(var + eps).
// out may equal x.
void instance_norm(const float* x, int64_t c, int64_t l, float eps, float* out);
// In place: x < 0 -> x * slope.
void leaky_relu(float* x, int64_t n, float slope);
// In place, each row of n values.
void softmax_rows(float* x, int64_t rows, int64_t n);

}  // namespace dasllama::kokoro
