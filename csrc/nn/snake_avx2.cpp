// The Snake kernel for AVX2 + FMA (built with DASLLAMA_ISA_FLAGS_avx2). Only sin^2 is needed,
// so the quadrant's sign is dropped: sin^2(x) = sin^2(r) for even quadrants, cos^2(r) for odd,
// r = x - j pi/2 with j = round(x 2/pi).
#include <immintrin.h>

#include <cmath>

#include "nn/snake.h"

namespace dasllama::nn::snake_kernels {

#if defined(__AVX2__) && defined(__FMA__)
namespace {

// Above this |alpha x| the three-part reduction loses bits: those rows go to sinf.
constexpr float kReduceLimit = 1e5f;

inline __m256 sin_squared(__m256 x) {
    const __m256 j = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.63661977236758134f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // pi/2 in three float parts (Cody-Waite); with FMA each product is exact inside the sum.
    __m256 r = _mm256_fnmadd_ps(j, _mm256_set1_ps(1.5707963705062866f), x);
    r = _mm256_fnmadd_ps(j, _mm256_set1_ps(-4.3711388286737929e-08f), r);
    r = _mm256_fnmadd_ps(j, _mm256_set1_ps(-1.7151245100059e-15f), r);
    const __m256 z = _mm256_mul_ps(r, r);
    // sin(r) = r + r z (s1 + z (s2 + z s3)); cos(r) = 1 - z/2 + z^2 (c1 + z (c2 + z c3))
    __m256 s = _mm256_fmadd_ps(_mm256_set1_ps(-1.9515295891e-4f), z, _mm256_set1_ps(8.3321608736e-3f));
    s = _mm256_fmadd_ps(s, z, _mm256_set1_ps(-1.6666654611e-1f));
    s = _mm256_fmadd_ps(_mm256_mul_ps(s, z), r, r);
    __m256 c = _mm256_fmadd_ps(_mm256_set1_ps(2.443315711809948e-5f), z, _mm256_set1_ps(-1.388731625493765e-3f));
    c = _mm256_fmadd_ps(c, z, _mm256_set1_ps(4.166664568298827e-2f));
    c = _mm256_fmadd_ps(_mm256_mul_ps(c, z), z, _mm256_fnmadd_ps(_mm256_set1_ps(0.5f), z, _mm256_set1_ps(1.0f)));
    const __m256i odd = _mm256_and_si256(_mm256_cvtps_epi32(j), _mm256_set1_epi32(1));
    const __m256 use_cos = _mm256_castsi256_ps(_mm256_cmpeq_epi32(odd, _mm256_set1_epi32(1)));
    const __m256 v = _mm256_blendv_ps(s, c, use_cos);
    return _mm256_mul_ps(v, v);
}

void row_scalar(float* x, int64_t n, float alpha, float inv_alpha) {
    for (int64_t i = 0; i < n; ++i) {
        const float s = std::sin(alpha * x[i]);
        x[i] = x[i] + inv_alpha * (s * s);
    }
}

void row_avx2(float* x, int64_t n, float alpha, float inv_alpha) {
    const __m256 a = _mm256_set1_ps(alpha), ia = _mm256_set1_ps(inv_alpha);
    const __m256 limit = _mm256_set1_ps(kReduceLimit), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 ax = _mm256_mul_ps(a, v);
        if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(ax, abs_mask), limit, _CMP_NLT_UQ))) {
            row_scalar(x + i, 8, alpha, inv_alpha);   // huge or NaN: the C library's answer
            continue;
        }
        _mm256_storeu_ps(x + i, _mm256_fmadd_ps(ia, sin_squared(ax), v));
    }
    row_scalar(x + i, n - i, alpha, inv_alpha);
}

const Kernels table{"avx2", row_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &table; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace dasllama::nn::snake_kernels
