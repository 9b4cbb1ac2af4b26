// The u8 x s8 -> i32 product of int8_ops.h with AVX2: each 16 bytes sign- (or zero-) extended
// to 16-bit lanes and multiplied pairwise into 32-bit sums (vpmaddwd), which is exact for every
// u8 x s8 value, unlike vpmaddubsw whose 16-bit pair sums saturate. Two rows by four columns
// per step share their loads.
#include <immintrin.h>

#include "tts/kokoro/int8_ops.h"

namespace dasllama::kokoro {

namespace {

inline int32_t hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

inline __m256i load_u8(const uint8_t* p) {
    return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i load_s8(const int8_t* p) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int MR, int NR>
void block(const uint8_t* a, int64_t lda, const int8_t* b, int64_t ldb, int64_t kp, int32_t* c,
           int64_t ldc) {   // b: NR plain rows ldb apart
    __m256i acc[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_si256();
    for (int64_t k = 0; k < kp; k += 16) {
        __m256i x[MR];
        for (int i = 0; i < MR; ++i) x[i] = load_u8(a + i * lda + k);
        for (int j = 0; j < NR; ++j) {
            const __m256i w = load_s8(b + j * ldb + k);
            for (int i = 0; i < MR; ++i)
                acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(x[i], w));
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i * ldc + j] = hsum(acc[i][j]);
}

void gemm_avx2(const uint8_t* a, int64_t lda, const int8_t* b, int64_t m, int64_t n,
               int64_t kp, int32_t* c, int64_t ldc) {
    const int64_t ldb = kp;
    int64_t i = 0;
    for (; i + 2 <= m; i += 2) {
        int64_t j = 0;
        for (; j + 4 <= n; j += 4)
            block<2, 4>(a + i * lda, lda, b + j * ldb, ldb, kp, c + i * ldc + j, ldc);
        for (; j < n; ++j) block<2, 1>(a + i * lda, lda, b + j * ldb, ldb, kp, c + i * ldc + j, ldc);
    }
    for (; i < m; ++i) {
        int64_t j = 0;
        for (; j + 4 <= n; j += 4)
            block<1, 4>(a + i * lda, lda, b + j * ldb, ldb, kp, c + i * ldc + j, ldc);
        for (; j < n; ++j) block<1, 1>(a + i * lda, lda, b + j * ldb, ldb, kp, c + i * ldc + j, ldc);
    }
}

const Int8Kernels kAvx2{"avx2", 1, int8_pack_rows, gemm_avx2, nullptr};

}  // namespace

const Int8Kernels* int8_kernels_avx2() {
#if defined(__AVX2__)
    return &kAvx2;
#else
    return nullptr;
#endif
}

}  // namespace dasllama::kokoro
