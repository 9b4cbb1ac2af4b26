// Activations the shared blocks need beyond cpu/ops.h's: the erf GELU, the exponentials of
// a softmax row and a row's log-sum-exp. A dispatched family (cpu/dispatch.h): generic
// kernels in activations.cpp, AVX2 + FMA ones in activations_avx2.cpp, picked once from the
// CPU's features;
// tests/cpp/test_nn.cpp checks every variant against double precision.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

// GELU, erf form (torch.nn.GELU()'s default, Whisper's): x = x/2 (1 + erf(x / sqrt 2)), in
// place, split over the pool.
void gelu_erf(float* x, int64_t n, ThreadPool& pool);

// In place: x = exp(x - max(x)) / sum, one row of n > 0 floats.
void softmax_row(float* x, int64_t n);

// log(sum_i exp(x_i)) over n > 0 floats, in double: max(x) + log(sum exp(x - max)).
// -infinity when every x_i is -infinity (a fully masked row). Decoding normalizes a step's
// logits with it: log p_i = x_i - log_sum_exp(x).
double log_sum_exp(const float* x, int64_t n);

namespace act {
struct Kernels {
    const char* isa;
    // generic: the C library's erf and exp, sums in double. avx2 and avx512 (the same
    // lanes' bits): erfc by a Chebyshev-fitted exponential (fractional error 1.2e-7) and a
    // polynomial exp (about 1 ulp), sums in double.
    void (*gelu_erf)(float* x, int64_t n);
    void (*softmax_row)(float* x, int64_t n);
    // generic: exp in double; avx2: the polynomial exp in float lanes, summed in double.
    double (*log_sum_exp)(const float* x, int64_t n);
};
std::vector<std::string> available_variants();  // best first, ends with "generic"
const Kernels& variant(std::string_view isa);   // throws Error when not available
const Kernels& active();
const Kernels* kernels_avx2();    // activations_avx2.cpp (x86-64 builds only)
const Kernels* kernels_avx512();  // activations_avx512.cpp (x86-64 builds only)
}  // namespace act

}  // namespace dasllama::nn
