// attend_self's kernels for AVX2 with FMA (built with DASLLAMA_ISA_FLAGS_avx2): the AVX-512
// file's tiles at half the width and with 16 registers instead of 32.
//
// scores: 6 queries x 16 keys (12 accumulators; per step 2 vector loads and 6 broadcasts feed
// 12 fused multiply-adds), over the key tile of 64 in four strips. weighted sum: 2 queries x
// 32 values (8 accumulators, 4 value loads per key), over the head's dimensions in strips of
// 32 then 16 (head_dim a multiple of 16).
#include <immintrin.h>

#include "nn/attention_self.h"

namespace dasllama::nn::self_attn {

#if defined(__AVX2__) && defined(__FMA__)
namespace {

constexpr int kScoreQ = 6;   // queries per scores tile
constexpr int kKeyStrip = 16;
constexpr int kSumQ = 2;     // queries per weighted-sum tile

template <int Q>
void scores_tile(const float* qs, int64_t hd, const float* kt, int64_t ld_kt, float* s,
                 int64_t ld_s) {
    __m256 acc[Q][2];
#pragma GCC unroll 6
    for (int i = 0; i < Q; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c) {
        const float* kc = kt + c * ld_kt;
        const __m256 k0 = _mm256_loadu_ps(kc), k1 = _mm256_loadu_ps(kc + 8);
#pragma GCC unroll 6
        for (int i = 0; i < Q; ++i) {
            const __m256 a = _mm256_broadcast_ss(qs + i * hd + c);
            acc[i][0] = _mm256_fmadd_ps(a, k0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(a, k1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < Q; ++i) {
        _mm256_storeu_ps(s + i * ld_s, acc[i][0]);
        _mm256_storeu_ps(s + i * ld_s + 8, acc[i][1]);
    }
}

template <int Q>
void scores_rows(const float* qs, int64_t hd, const float* kt, int64_t ld_kt, float* s,
                 int64_t ld_s) {
    for (int64_t j = 0; j < kKeyPad; j += kKeyStrip)
        scores_tile<Q>(qs, hd, kt + j, ld_kt, s + j, ld_s);
}

// Key tile by key tile, every query of the call against it (as the AVX-512 kernel).
void scores_avx2(const float* qs, int64_t nq, int64_t hd, const float* kt, int64_t ld_kt,
                 int64_t n_kt, float* s, int64_t ld_s) {
    if (n_kt % kKeyPad != 0) {
        scores_generic(qs, nq, hd, kt, ld_kt, n_kt, s, ld_s);
        return;
    }
    for (int64_t j = 0; j < n_kt; j += kKeyPad) {
        int64_t i = 0;
        for (; i + kScoreQ <= nq; i += kScoreQ)
            scores_rows<kScoreQ>(qs + i * hd, hd, kt + j, ld_kt, s + i * ld_s + j, ld_s);
        const float* qr = qs + i * hd;
        float* sr = s + i * ld_s + j;
        switch (nq - i) {
            case 5: scores_rows<5>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 4: scores_rows<4>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 3: scores_rows<3>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 2: scores_rows<2>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            case 1: scores_rows<1>(qr, hd, kt + j, ld_kt, sr, ld_s); break;
            default: break;
        }
    }
}

// Q queries x V vectors of 8 values, from column c0 of v and tot.
template <int Q, int V>
void wsum_tile(const float* p, int64_t ld_p, const float* v, int64_t ld_v, int64_t nk,
               int64_t hd, float* tot) {
    __m256 acc[Q][V];
    for (int i = 0; i < Q; ++i)
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) acc[i][u] = _mm256_setzero_ps();
    for (int64_t j = 0; j < nk; ++j) {
        __m256 vv[V];
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) vv[u] = _mm256_loadu_ps(v + j * ld_v + 8 * u);
        for (int i = 0; i < Q; ++i) {
            const __m256 w = _mm256_broadcast_ss(p + i * ld_p + j);
#pragma GCC unroll 4
            for (int u = 0; u < V; ++u) acc[i][u] = _mm256_fmadd_ps(w, vv[u], acc[i][u]);
        }
    }
    for (int i = 0; i < Q; ++i)
#pragma GCC unroll 4
        for (int u = 0; u < V; ++u) {
            float* t = tot + i * hd + 8 * u;
            _mm256_storeu_ps(t, _mm256_add_ps(_mm256_loadu_ps(t), acc[i][u]));
        }
}

template <int Q>
void wsum_strips(const float* p, int64_t ld_p, const float* v, int64_t ld_v, int64_t nk,
                 int64_t hd, float* tot) {
    int64_t c = 0;
    for (; c + 32 <= hd; c += 32) wsum_tile<Q, 4>(p, ld_p, v + c, ld_v, nk, hd, tot + c);
    if (c < hd) wsum_tile<Q, 2>(p, ld_p, v + c, ld_v, nk, hd, tot + c);   // the last 16
}

void weighted_sum_avx2(const float* p, int64_t ld_p, int64_t nq, const float* v, int64_t ld_v,
                       int64_t nk, int64_t hd, float* tot) {
    if (hd % 16 != 0) {
        weighted_sum_generic(p, ld_p, nq, v, ld_v, nk, hd, tot);
        return;
    }
    int64_t i = 0;
    for (; i + kSumQ <= nq; i += kSumQ)
        wsum_strips<kSumQ>(p + i * ld_p, ld_p, v, ld_v, nk, hd, tot + i * hd);
    if (i < nq) wsum_strips<1>(p + i * ld_p, ld_p, v, ld_v, nk, hd, tot + i * hd);
}

const Kernels avx2{"avx2", scores_avx2, weighted_sum_avx2};

}  // namespace

const Kernels* kernels_avx2() { return &avx2; }
#else
const Kernels* kernels_avx2() { return nullptr; }
#endif

}  // namespace dasllama::nn::self_attn
