// The u8 x s8 -> i32 product of int8_ops.h with AVX-512 VNNI: vpdpbusd multiplies 64 unsigned
// by 64 signed bytes and adds each group of four products into a 32-bit lane, without
// saturation (vpdpbusds would saturate), so the sums are exact. Four rows by four columns per
// step share their loads.
#include <immintrin.h>

#include "tts/kokoro/int8_ops.h"

namespace dasllama::kokoro {

#if defined(__AVX512VNNI__) && defined(__AVX512F__)
namespace {

template <int MR, int NR>
void block(const uint8_t* a, int64_t lda, const int8_t* b, int64_t ldb, int64_t kp, int32_t* c,
           int64_t ldc) {
    __m512i acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_setzero_si512();
    for (int64_t k = 0; k < kp; k += 64) {
        __m512i x[MR];
        for (int i = 0; i < MR; ++i) x[i] = _mm512_loadu_si512(a + i * lda + k);
        for (int j = 0; j < NR; ++j) {
            const __m512i w = _mm512_loadu_si512(b + j * ldb + k);
            for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], x[i], w);
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i * ldc + j] = _mm512_reduce_add_epi32(acc[i][j]);
}

template <int MR>
void row_block(const uint8_t* a, int64_t lda, const int8_t* b, int64_t ldb, int64_t n,
               int64_t kp, int32_t* c, int64_t ldc) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) block<MR, 4>(a, lda, b + j * ldb, ldb, kp, c + j, ldc);
    for (; j < n; ++j) block<MR, 1>(a, lda, b + j * ldb, ldb, kp, c + j, ldc);
}

void gemm_avx512(const uint8_t* a, int64_t lda, const int8_t* b, int64_t ldb, int64_t m,
                 int64_t n, int64_t kp, int32_t* c, int64_t ldc) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) row_block<4>(a + i * lda, lda, b, ldb, n, kp, c + i * ldc, ldc);
    for (; i + 2 <= m; i += 2) row_block<2>(a + i * lda, lda, b, ldb, n, kp, c + i * ldc, ldc);
    for (; i < m; ++i) row_block<1>(a + i * lda, lda, b, ldb, n, kp, c + i * ldc, ldc);
}

const Int8Kernels kAvx512{"avx512", gemm_avx512};

}  // namespace
#endif

const Int8Kernels* int8_kernels_avx512() {
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
    return &kAvx512;
#else
    return nullptr;
#endif
}

}  // namespace dasllama::kokoro
