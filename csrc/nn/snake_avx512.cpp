// The Snake kernel for AVX-512 (built with DASLLAMA_ISA_FLAGS_avx512): snake_avx2.cpp's
// sin^2 in 16 lanes (snake_avx512.h), the row's tail under a mask instead of the scalar loop.
#include "nn/snake_avx512.h"

#include "nn/snake.h"

namespace dasllama::nn::snake_kernels {

#if defined(__AVX512F__)
namespace {

void row_avx512(float* x, int64_t n, float alpha, float inv_alpha) {
    const __m512 a = _mm512_set1_ps(alpha), ia = _mm512_set1_ps(inv_alpha);
    for (int64_t i = 0; i < n; i += 16) {
        const int64_t left = n - i;
        const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        snake_avx512::store_snake(x + i, m, left >= 16 ? 16 : left, v, a, ia, alpha, inv_alpha);
    }
}

const Kernels table{"avx512", row_avx512};

}  // namespace

const Kernels* kernels_avx512() { return &table; }
#else
const Kernels* kernels_avx512() { return nullptr; }
#endif

}  // namespace dasllama::nn::snake_kernels
