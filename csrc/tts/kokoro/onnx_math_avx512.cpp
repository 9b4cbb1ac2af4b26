// MLAS's logistic and tanh of onnx_math.h over arrays with AVX-512, 8 values at a time, with
// the scalar version's roundings: each Horner step is a double fused multiply-add of float32
// values (their product is exact in double, so fusing in double rounds exactly as the scalar
// form's product-then-add does) rounded back to float32; the clamps, the float32 products, the
// division and the final add are the same single float32 operations. And the AdaIN instance
// norm with the generic form's reductions and roundings.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "nn/snake_avx512.h"
#include "tts/kokoro/onnx_math.h"

namespace dasllama::kokoro {

#if defined(__AVX512F__) && defined(__AVX512DQ__)
namespace {

inline __m256 horner(__m256 x2, const float* c, int n) {
    const __m512d x2d = _mm512_cvtps_pd(x2);
    __m256 acc = _mm512_cvtpd_ps(_mm512_fmadd_pd(x2d, _mm512_set1_pd(double(c[0])),
                                                 _mm512_set1_pd(double(c[1]))));
    for (int i = 2; i < n; ++i)
        acc = _mm512_cvtpd_ps(_mm512_fmadd_pd(_mm512_cvtps_pd(acc), x2d,
                                              _mm512_set1_pd(double(c[i]))));
    return acc;
}

constexpr float kLP[] = {4.37031012579801e-11f, 1.15627324459942e-07f, 6.08574864600143e-05f,
                         8.51377133304701e-03f, 2.48287947061529e-01f};
constexpr float kLQ[] = {6.10247389755681e-13f, 5.76102136993427e-09f, 6.29106785017040e-06f,
                         1.70198817374094e-03f, 1.16817656904453e-01f, 9.93151921023180e-01f};
constexpr float kTP[] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                         5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                         4.89352455891786e-03f};
constexpr float kTQ[] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                         4.89352518554385e-03f};

inline __m256 clamp(__m256 x, float lim) {
    return _mm256_min_ps(_mm256_set1_ps(lim), _mm256_max_ps(_mm256_set1_ps(-lim), x));
}

void logistic_avx512(const float* x, int64_t n, float* out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = clamp(_mm256_loadu_ps(x + i), 18.0f);
        const __m256 x2 = _mm256_mul_ps(v, v);
        const __m256 p = _mm256_mul_ps(horner(x2, kLP, 5), v);
        const __m256 q = horner(x2, kLQ, 6);
        __m256 r = _mm256_add_ps(_mm256_div_ps(p, q), _mm256_set1_ps(0.5f));
        r = _mm256_min_ps(_mm256_set1_ps(1.0f), _mm256_max_ps(_mm256_setzero_ps(), r));
        _mm256_storeu_ps(out + i, r);
    }
    for (; i < n; ++i) out[i] = mlas_logistic(x[i]);
}

void tanh_avx512(const float* x, int64_t n, float* out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = clamp(_mm256_loadu_ps(x + i), 9.0f);
        const __m256 x2 = _mm256_mul_ps(v, v);
        const __m256 p = _mm256_mul_ps(horner(x2, kTP, 7), v);
        _mm256_storeu_ps(out + i, _mm256_div_ps(p, horner(x2, kTQ, 4)));
    }
    for (; i < n; ++i) out[i] = mlas_tanh(x[i]);
}

// ---- the instance norm: NumPy's pairwise sums in double (pairwise_sum.h) with its eight
// running sums as the eight lanes of one vector, over values made on the fly (x as double;
// then (x - mean)^2 rounded to float32, as double), so no double copy of a row is kept. The
// float32 steps are single instructions with explicit rounding, which the compiler leaves
// unfused.
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

struct Values {           // double(x[i])
    const float* x;
    __m512d eight(int64_t i) const { return _mm512_cvtps_pd(_mm256_loadu_ps(x + i)); }
    double one(int64_t i) const { return double(x[i]); }
};

struct Squares {          // double(float(x[i] - mean)^2)
    const float* x;
    float mean;
    __m512d eight(int64_t i) const {
        const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(mean));
        return _mm512_cvtps_pd(_mm256_mul_ps(d, d));
    }
    double one(int64_t i) const {
        const float d = x[i] - mean;
        const float sq = d * d;
        return double(sq);
    }
};

template <class V>
double pairwise(const V& v, int64_t i0, int64_t n) {
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; ++i) res = res + v.one(i0 + i);
        return res;
    }
    if (n <= 128) {   // kPairwiseBlock
        __m512d r = v.eight(i0);
        int64_t i = 8;
        for (; i < n - n % 8; i += 8) r = _mm512_add_pd(r, v.eight(i0 + i));
        alignas(64) double l[8];
        _mm512_store_pd(l, r);
        double res = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        for (; i < n; ++i) res = res + v.one(i0 + i);
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise(v, i0, n2) + pairwise(v, i0 + n2, n - n2);
}

void instance_norm_avx512(const float* x, int64_t c, int64_t l, float eps, float* out) {
    for (int64_t r = 0; r < c; ++r) {
        const float* row = x + r * l;
        const float mean = static_cast<float>(pairwise(Values{row}, 0, l) / double(l));
        const float var = static_cast<float>(pairwise(Squares{row, mean}, 0, l) / double(l));
        const float den = std::sqrt(var + eps);
        const __m512 mv = _mm512_set1_ps(mean), dv = _mm512_set1_ps(den);
        float* o = out + r * l;
        int64_t j = 0;
        for (; j + 16 <= l; j += 16)
            _mm512_storeu_ps(o + j, _mm512_div_round_ps(
                                        _mm512_sub_round_ps(_mm512_loadu_ps(row + j), mv, kRound),
                                        dv, kRound));
        for (; j < l; ++j) {
            const float d = row[j] - mean;
            o[j] = d / den;
        }
    }
}

// AdaIN + Snake + the quantization range (ActivationKernels::adain_snake): instance_norm_avx512's
// statistics and normalization, the affine as two rounded float32 steps (AdaIN1d's scalar
// g * v + b, never fused), then nn::snake's AVX-512 lanes; the range over what is stored.
void adain_snake_avx512(const float* x, int64_t rows, int64_t l, float eps, const float* h_gamma,
                        const float* h_beta, const float* alpha, float* out, float range[3]) {
    __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps(), zero = _mm512_setzero_ps();
    const __m512 zeros = _mm512_setzero_ps();
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * l;
        const float mean = static_cast<float>(pairwise(Values{row}, 0, l) / double(l));
        const float var = static_cast<float>(pairwise(Squares{row, mean}, 0, l) / double(l));
        const float den = std::sqrt(var + eps);
        const float g = h_gamma[r] + 1.0f, b = h_beta[r];
        const float a = alpha[r], ia = 1.0f / a;
        const __m512 mv = _mm512_set1_ps(mean), dv = _mm512_set1_ps(den);
        const __m512 gv = _mm512_set1_ps(g), bv = _mm512_set1_ps(b);
        const __m512 av = _mm512_set1_ps(a), iav = _mm512_set1_ps(ia);
        float* o = out + r * l;
        for (int64_t j = 0; j < l; j += 16) {
            const int64_t left = l - j;
            const __mmask16 m = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1u);
            __m512 v = _mm512_div_round_ps(
                _mm512_sub_round_ps(_mm512_maskz_loadu_ps(m, row + j), mv, kRound), dv, kRound);
            v = _mm512_add_round_ps(_mm512_mul_round_ps(gv, v, kRound), bv, kRound);
            nn::snake_avx512::store_snake(o + j, m, left >= 16 ? 16 : left, v, av, iav, a, ia);
            const __m512 y = _mm512_maskz_loadu_ps(m, o + j);   // masked lanes: 0, in range
            lo = _mm512_min_ps(lo, y);
            hi = _mm512_max_ps(hi, y);
            zero = _mm512_add_ps(zero, _mm512_mul_ps(y, zeros));
        }
    }
    range[0] = _mm512_reduce_min_ps(lo);
    range[1] = _mm512_reduce_max_ps(hi);
    range[2] = _mm512_reduce_add_ps(zero);
}

const ActivationKernels kAvx512{"avx512", logistic_avx512, tanh_avx512, instance_norm_avx512,
                                adain_snake_avx512};

}  // namespace
#endif

const ActivationKernels* activation_kernels_avx512() {
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    return &kAvx512;
#else
    return nullptr;
#endif
}

}  // namespace dasllama::kokoro
