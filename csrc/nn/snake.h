// The Snake activation of neural vocoders (iSTFTNet's AdaIN residual blocks, BigVGAN, DAC):
// snake(x) = x + (1 / alpha) sin(alpha x)^2 with one alpha per channel, over channel-major
// rows x [C, L]. A dispatched family (cpu/dispatch.h): the generic kernel uses the C library's
// sinf in the reference's order of roundings (alpha x, sin, squared, times 1 / alpha, plus x);
// the AVX2 and AVX-512 ones a vector sine (Cody-Waite reduction by pi / 2 in three parts, minimax
// polynomials on [-pi/4, pi/4]: within 2 ulp of sinf for |alpha x| < 1e5, the range these
// blocks meet; larger arguments go to sinf). tests/cpp/test_snake.cpp holds the bar.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dasllama {
class ThreadPool;
}

namespace dasllama::nn {

// In place over rows [c, l]; alpha: c values (nonzero). Split over the pool by rows.
void snake(float* x, int64_t c, int64_t l, const float* alpha, ThreadPool& pool);

namespace snake_kernels {
struct Kernels {
    const char* isa;
    // One row of n values with its alpha and 1 / alpha.
    void (*row)(float* x, int64_t n, float alpha, float inv_alpha);
};
std::vector<std::string> available_variants();  // best first, ends with "generic"
const Kernels& variant(std::string_view isa);   // throws Error when not available
const Kernels& active();
const Kernels* kernels_avx2();    // snake_avx2.cpp (x86-64 builds only)
const Kernels* kernels_avx512();  // snake_avx512.cpp (x86-64 builds only)
}  // namespace snake_kernels

}  // namespace dasllama::nn
